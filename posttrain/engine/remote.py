"""`RemoteEngine`: the `Engine` protocol over any OpenAI-compatible /v1/completions endpoint
(vLLM, SGLang, `posttrain serve`).

Each prompt is one POST with the prompt as token ids, `max_concurrency` at a time (the server
batches them). Besides the OpenAI fields the body carries the vLLM/SGLang extensions that keep the
`Engine` contract: `ignore_eos` with explicit `stop_token_ids` (the caller's stop ids, nothing
else), `top_k`/`min_p` when set, `skip_special_tokens: false`, `logprobs: 1`, and the token-id
returns `return_token_ids` (vLLM >= 0.10.2; ours always answers `token_ids`) and
`return_tokens_as_token_ids`. `extra_body` adds or (with None) removes fields for stricter servers.

Token ids and logprobs are read back, in this order of preference (`parse_choice`):
1. `choice.token_ids` (our server; vLLM's `return_token_ids`);
2. logprob tokens spelled "token_id:N" (vLLM's `return_tokens_as_token_ids`);
3. otherwise the text is re-tokenised with the tokenizer (plus a stop string or stop token the
   server names in `stop_reason`/`matched_stop`). This is approximate: a re-tokenisation can
   differ from what was sampled, so the server's logprobs are kept only if its logprob tokens
   decode to the same pieces, and are NaN otherwise.
When the server gives no logprobs, `Completion.logprobs` holds NaN for every token: callers that
need the sampler's logprobs (an RL loss) must recompute them.

Unseeded requests get a seed from `request_seed` (the global torch RNG), as in every engine.
Connection errors and 408/429/502/503/504 are retried with exponential backoff; other errors
raise `RemoteEngineError` with the server's message.

Weights: `update_weights` needs `weights_dir`, a directory the server can read: the state dict is
written there as model.safetensors and the server is asked to load it through SGLang's
`POST /update_weights_from_disk {"model_path": weights_dir}` (served by `posttrain serve` with
weight updates enabled; for SGLang put the model's config.json in that directory once). vLLM's
OpenAI server has no such endpoint: use `VLLMEngine` in-process, or restart it on saved weights.
"""

from __future__ import annotations

import math
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Mapping, Sequence

import httpx
import torch

from posttrain.core.fsio import atomic_path
from posttrain.engine.protocol import Completion, SamplingParams, check_batch, request_seed

_RETRY_STATUS = {408, 429, 502, 503, 504}
_TOKEN_ID = re.compile(r"token_id:(\d+)$")


class RemoteEngineError(RuntimeError):
    """The server refused a request or could not be reached after the retries."""


def completion_request(model: str, prompt: Sequence[int], p: SamplingParams, seed: int) -> dict[str, Any]:
    """The /v1/completions body for one prompt under `p`."""
    body: dict[str, Any] = {
        "model": model, "prompt": list(prompt), "max_tokens": p.max_tokens, "temperature": p.temperature,
        "top_p": p.top_p, "seed": seed, "n": 1, "stream": False, "logprobs": 1,
        "ignore_eos": True, "stop_token_ids": list(p.stop_token_ids), "skip_special_tokens": False,
        "return_token_ids": True, "return_tokens_as_token_ids": True,
    }
    if p.stop:
        body["stop"] = list(p.stop)
    if p.top_k > 0:
        body["top_k"] = p.top_k
    if p.min_p > 0:
        body["min_p"] = p.min_p
    return body


def parse_choice(choice: Mapping[str, Any], tokenizer: Any = None) -> tuple[Completion, str]:
    """A /v1/completions choice as a Completion, and how its token ids were read:
    "token_ids", "logprob_tokens" or "retokenized" (see the module docstring)."""
    finish = choice.get("finish_reason")
    if finish not in ("stop", "length"):
        raise RemoteEngineError(f"the server ended a completion with finish_reason {finish!r}")
    lp = choice.get("logprobs") or {}
    tokens, values = lp.get("tokens"), lp.get("token_logprobs")
    ids = choice.get("token_ids")
    if isinstance(ids, list) and all(isinstance(i, int) for i in ids):
        how = "token_ids"
    elif tokens and all(isinstance(t, str) and _TOKEN_ID.match(t) for t in tokens):
        ids, how = [int(_TOKEN_ID.match(t).group(1)) for t in tokens], "logprob_tokens"
    elif tokenizer is not None:
        ids, how = _retokenize(choice, tokenizer), "retokenized"
        pieces = [tokenizer.decode([i], skip_special_tokens=False) for i in ids]
        if tokens != pieces:
            values = None
    else:
        raise RemoteEngineError("the server returned no token ids and the RemoteEngine has no tokenizer "
                                "to re-tokenise the text with")
    if not (isinstance(values, list) and len(values) == len(ids)):
        values = [math.nan] * len(ids)
    logprobs = tuple(math.nan if v is None else float(v) for v in values)
    return Completion(tuple(ids), logprobs, finish), how


def _retokenize(choice: Mapping[str, Any], tokenizer: Any) -> list[int]:
    text = choice.get("text") or ""
    reason = choice.get("stop_reason", choice.get("matched_stop"))
    if isinstance(reason, str) and choice.get("finish_reason") == "stop":
        text += reason  # the server trimmed the stop string; the contract ends on its last token
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    if isinstance(reason, int) and not isinstance(reason, bool) and (not ids or ids[-1] != reason):
        ids.append(reason)
    return ids


def save_state_dict(state_dict: Mapping[str, torch.Tensor], directory: str | os.PathLike) -> Path:
    """Write `state_dict` to directory/model.safetensors atomically (tied tensors copied apart)."""
    from safetensors.torch import save_file

    path = Path(directory) / "model.safetensors"
    with atomic_path(path) as tmp:
        save_file({k: v.detach().to("cpu").contiguous().clone() for k, v in state_dict.items()}, str(tmp))
    return path


class RemoteEngine:
    """Implements `Engine` by POSTing to `base_url` ("http://host:port" or ".../v1")."""

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, tokenizer: Any = None,
                 timeout: float = 600.0, max_concurrency: int = 64, max_retries: int = 5, backoff_s: float = 0.5,
                 weights_dir: str | os.PathLike | None = None, extra_body: Mapping[str, Any] | None = None):
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        root = base_url.rstrip("/")
        self.root = root[: -len("/v1")] if root.endswith("/v1") else root
        self.model, self.tokenizer = model, tokenizer
        self.max_retries, self.backoff_s = max_retries, backoff_s
        self.weights_dir = Path(weights_dir) if weights_dir is not None else None
        self.extra_body = dict(extra_body or {})
        self.version = 0
        self.last_paths: list[str] = []  # how each completion of the last generate was read back
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(timeout=timeout, headers=headers,
                                   limits=httpx.Limits(max_connections=max_concurrency))
        self._pool = ThreadPoolExecutor(max_concurrency, thread_name_prefix="remote-engine")

    def close(self) -> None:
        self._pool.shutdown(wait=False)
        self.client.close()

    def _post(self, path: str, body: Mapping[str, Any]) -> Any:
        url = self.root + path
        for attempt in range(self.max_retries + 1):
            last = attempt == self.max_retries
            try:
                r = self.client.post(url, json=body)
            except httpx.TransportError as exc:
                if last:
                    raise RemoteEngineError(f"{url}: {type(exc).__name__}: {exc} "
                                            f"(after {self.max_retries + 1} tries)") from None
            else:
                if r.status_code == 200:
                    return r.json()
                if r.status_code not in _RETRY_STATUS or last:
                    raise RemoteEngineError(f"{url}: HTTP {r.status_code}: {_message(r)}")
            time.sleep(min(self.backoff_s * 2**attempt, 30.0))
        raise AssertionError("unreachable")

    def _complete(self, body: dict[str, Any]) -> tuple[Completion, str]:
        reply = self._post("/v1/completions", body)
        choices = reply.get("choices") if isinstance(reply, dict) else None
        if not choices:
            raise RemoteEngineError(f"{self.root}/v1/completions answered without choices: {str(reply)[:200]}")
        return parse_choice(choices[0], self.tokenizer)

    def generate(self, prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams]) -> list[Completion]:
        check_batch(prompts, params)
        seeds = [request_seed(p) for p in params]
        bodies = []
        for prompt, p, seed in zip(prompts, params, seeds):
            body = {**completion_request(self.model, prompt, p, seed), **self.extra_body}
            bodies.append({k: v for k, v in body.items() if v is not None})
        results = list(self._pool.map(self._complete, bodies))
        self.last_paths = [how for _, how in results]
        return [c for c, _ in results]

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Save to `weights_dir` and have the server load it (POST /update_weights_from_disk)."""
        if self.weights_dir is None:
            raise NotImplementedError(
                "RemoteEngine.update_weights needs weights_dir (a directory the server can read) and a server "
                "with POST /update_weights_from_disk (SGLang, or `posttrain serve` with weight updates enabled); "
                "vLLM's OpenAI server has none: use the vllm engine in-process or restart the server")
        save_state_dict(state_dict, self.weights_dir)
        try:
            reply = self._post("/update_weights_from_disk", {"model_path": str(self.weights_dir), "version": version})
        except RemoteEngineError as exc:
            if "HTTP 404" in str(exc):
                raise NotImplementedError(f"the server at {self.root} does not take weight updates: {exc}") from None
            raise
        if isinstance(reply, dict) and reply.get("success") is False:
            raise RemoteEngineError(f"{self.root}/update_weights_from_disk: {reply.get('message')}")
        self.version = int(version)


def _message(r: httpx.Response) -> str:
    try:
        body = r.json()
        err = body.get("error") if isinstance(body, dict) else None
        msg = err.get("message") if isinstance(err, dict) else (body.get("message") or body.get("detail"))
        return str(msg or body)[:500]
    except ValueError:
        return r.text[:500]


def served_models(base_url: str, api_key: str | None = None, timeout: float = 30.0) -> list[str]:
    """The model ids a server lists at GET /v1/models."""
    root = base_url.rstrip("/")
    root = root[: -len("/v1")] if root.endswith("/v1") else root
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    r = httpx.get(f"{root}/v1/models", headers=headers, timeout=timeout)
    r.raise_for_status()
    return [m["id"] for m in r.json().get("data", [])]


def make_engine(model_or_path: str, tokenizer: Any = None, **options: Any) -> RemoteEngine:
    """`ENGINES["remote"]`. Either `make_engine("http://host:8000/v1", tok)` (the server's first
    listed model) or `make_engine("model-name", tok, base_url="http://host:8000/v1")`; other
    options go to RemoteEngine (api_key, timeout, max_concurrency, weights_dir, ...)."""
    base_url = options.pop("base_url", None)
    if base_url is None:
        if not str(model_or_path).startswith(("http://", "https://")):
            raise ValueError(f"remote engine: {model_or_path!r} is not a URL; pass base_url=... "
                             "(the server's http://host:port/v1) with the model name")
        base_url = str(model_or_path)
        model = options.pop("model", None)
        if model is None:
            listed = served_models(base_url, options.get("api_key"))
            if not listed:
                raise RemoteEngineError(f"{base_url} lists no models")
            model = listed[0]
    else:
        model = str(model_or_path)
    return RemoteEngine(base_url, model, tokenizer=tokenizer, **options)
