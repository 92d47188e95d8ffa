"""Request and response shapes of the OpenAI-compatible server (`engine/server/app.py`).

Requests are pydantic models (unknown fields are ignored, as vLLM does); `RequestError` is a bad
request as an OpenAI error body. Response pieces are plain functions over plain values, so the
server module only moves tokens between HTTP and the engine.

Supported beyond OpenAI's fields (vLLM spells them the same): `top_k` (0 or -1 = off), `min_p`,
`stop_token_ids`, `ignore_eos`, `skip_special_tokens`, `return_tokens_as_token_ids` (logprob
tokens as "token_id:N"). Every choice carries `token_ids` (the completion's) and
`prompt_token_ids`; streamed chunks carry each delta's `token_ids`.

Logprobs are the engine sampler's: log_softmax(logits / T)[token] (T = 0 reports T = 1).
Completions `logprobs: N` and chat `top_logprobs: N` give the sampled token's logprob only: the
`top_logprobs` entries hold that one token whatever N is (the engine does not return the others).
"""

from __future__ import annotations

import math
import time
import uuid
from typing import Any, Literal, Sequence, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from posttrain.engine.protocol import SamplingParams


class RequestError(Exception):
    """A request the server will not run: becomes {"error": {...}} with `status`."""

    def __init__(self, message: str, param: str | None = None, *, status: int = 400, code: str | None = None,
                 type: str = "invalid_request_error"):
        super().__init__(message)
        self.message, self.param, self.status, self.code, self.type = message, param, status, code, type

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class _Common(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: Union[str, list[str], None] = None
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[str, float] | None = None
    # extensions (vLLM names)
    top_k: int = 0
    min_p: float = 0.0
    stop_token_ids: list[int] = Field(default_factory=list)
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    return_tokens_as_token_ids: bool = False


class CompletionRequest(_Common):
    prompt: Union[str, list[int], list[str], list[list[int]]]
    max_tokens: int | None = 16
    logprobs: int | None = None
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None


class ChatRequest(_Common):
    messages: list[dict[str, Any]]
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
    tools: list[Any] | None = None
    response_format: dict[str, Any] | None = None


def parse(model_cls: type[BaseModel], body: Any) -> Any:
    """Validate a decoded JSON body; the first problem becomes a RequestError naming its field."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    try:
        return model_cls.model_validate(body)
    except ValidationError as exc:
        err = exc.errors()[0]
        param = ".".join(str(x) for x in err["loc"] if not str(x).startswith(("list[", "str", "int")))
        got = "" if err["type"] == "missing" else f" (got {str(err.get('input'))[:60]!r})"
        raise RequestError(f"{param or 'body'}: {err['msg']}{got}", param or None) from None


def check_common(req: _Common) -> None:
    """OpenAI-style range checks shared by both endpoints; each names its field."""
    if not 1 <= req.n <= 128:
        raise RequestError(f"n must be in [1, 128], got {req.n}", "n")
    if not req.temperature >= 0:
        raise RequestError(f"temperature must be >= 0, got {req.temperature}", "temperature")
    if not 0 < req.top_p <= 1:
        raise RequestError(f"top_p must be in (0, 1], got {req.top_p}", "top_p")
    if req.top_k < -1:
        raise RequestError(f"top_k must be -1 or 0 (off) or >= 1, got {req.top_k}", "top_k")
    if not 0 <= req.min_p <= 1:
        raise RequestError(f"min_p must be in [0, 1], got {req.min_p}", "min_p")
    if any(not s for s in stop_list(req.stop)):
        raise RequestError("stop strings must not be empty", "stop")
    for name in ("presence_penalty", "frequency_penalty"):
        if getattr(req, name):
            raise RequestError(f"{name} is not supported by this server (only 0)", name)
    if req.logit_bias:
        raise RequestError("logit_bias is not supported by this server", "logit_bias")


def check_completion(req: CompletionRequest) -> None:
    check_common(req)
    if req.echo:
        raise RequestError("echo is not supported by this server", "echo")
    if req.suffix:
        raise RequestError("suffix is not supported by this server", "suffix")
    if req.best_of not in (None, req.n):
        raise RequestError("best_of is not supported by this server (only best_of == n)", "best_of")
    if req.logprobs is not None and req.logprobs < 0:
        raise RequestError(f"logprobs must be >= 0, got {req.logprobs}", "logprobs")


def check_chat(req: ChatRequest) -> None:
    check_common(req)
    if not req.messages:
        raise RequestError("messages must not be empty", "messages")
    if req.tools:
        raise RequestError("tools are not supported by this server", "tools")
    if req.response_format and req.response_format.get("type", "text") != "text":
        raise RequestError("response_format other than text is not supported by this server", "response_format")
    if req.top_logprobs is not None and not 0 <= req.top_logprobs <= 20:
        raise RequestError(f"top_logprobs must be in [0, 20], got {req.top_logprobs}", "top_logprobs")
    if req.top_logprobs and not req.logprobs:
        raise RequestError("top_logprobs needs logprobs: true", "top_logprobs")


def chat_messages(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Messages for a chat template: roles kept, content as one string (text parts joined)."""
    out = []
    for i, m in enumerate(messages):
        role, content = m.get("role"), m.get("content")
        if not isinstance(role, str):
            raise RequestError(f"messages[{i}].role must be a string", f"messages.{i}.role")
        if isinstance(content, list):
            parts = []
            for part in content:
                if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                    raise RequestError(f"messages[{i}].content: only text parts are supported", f"messages.{i}.content")
                parts.append(part["text"])
            content = "".join(parts)
        elif content is None:
            content = ""
        elif not isinstance(content, str):
            raise RequestError(f"messages[{i}].content must be a string or a list of text parts",
                               f"messages.{i}.content")
        out.append({"role": role, "content": content})
    return out


def stop_list(stop: str | list[str] | None) -> tuple[str, ...]:
    if stop is None:
        return ()
    return (stop,) if isinstance(stop, str) else tuple(stop)


def sampling_params(req: _Common, max_tokens: int, eos_ids: Sequence[int], choice: int) -> SamplingParams:
    """Engine params for choice `choice` of a request: a given seed becomes seed + choice (so the
    n choices differ and each is reproducible); eos ids stop unless `ignore_eos`."""
    stop_ids = tuple(dict.fromkeys([*req.stop_token_ids, *(() if req.ignore_eos else eos_ids)]))
    return SamplingParams(
        temperature=req.temperature, top_p=req.top_p, top_k=max(req.top_k, 0), min_p=req.min_p,
        max_tokens=max_tokens, stop_token_ids=stop_ids, stop=stop_list(req.stop),
        seed=None if req.seed is None else req.seed + choice,
    )


# ---- responses ----


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def finite(logprob: float) -> float:
    """JSON has no -inf: a zero-probability token is reported as -9999.0 (as vLLM does)."""
    return logprob if math.isfinite(logprob) else -9999.0


def completion_logprobs(tokens: list[str], logprobs: list[float], offset: int = 0) -> dict[str, Any]:
    """The completions `logprobs` object; `top_logprobs` holds the sampled token only."""
    logprobs = [finite(lp) for lp in logprobs]
    offsets, pos = [], offset
    for t in tokens:
        offsets.append(pos)
        pos += len(t)
    return {"tokens": tokens, "token_logprobs": logprobs,
            "top_logprobs": [{t: lp} for t, lp in zip(tokens, logprobs)], "text_offset": offsets}


def chat_logprobs(tokens: list[str], logprobs: list[float], top: int) -> dict[str, Any]:
    """The chat `logprobs` object; `top_logprobs` lists the sampled token only (when top >= 1)."""
    content = []
    for t, lp in zip(tokens, logprobs):
        entry = {"token": t, "logprob": finite(lp), "bytes": list(t.encode("utf-8"))}
        content.append({**entry, "top_logprobs": [entry] if top else []})
    return {"content": content}


def completion_choice(index: int, text: str, finish: str | None, token_ids: list[int],
                      prompt_ids: list[int] | None, logprobs: dict | None) -> dict[str, Any]:
    choice = {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish, "token_ids": token_ids}
    if prompt_ids is not None:
        choice["prompt_token_ids"] = prompt_ids
    return choice


def chat_choice(index: int, text: str, finish: str | None, token_ids: list[int],
                prompt_ids: list[int], logprobs: dict | None) -> dict[str, Any]:
    return {"index": index, "message": {"role": "assistant", "content": text}, "logprobs": logprobs,
            "finish_reason": finish, "token_ids": token_ids, "prompt_token_ids": prompt_ids}


def chat_delta_choice(index: int, delta: dict[str, Any], finish: str | None, token_ids: list[int],
                      logprobs: dict | None) -> dict[str, Any]:
    return {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish, "token_ids": token_ids}


class Envelope:
    """The fields every response or chunk of one request shares (id, created, model)."""

    def __init__(self, kind: Literal["text_completion", "chat.completion"], model: str):
        self.kind, self.model = kind, model
        self.id = f"{'cmpl' if kind == 'text_completion' else 'chatcmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())

    def full(self, choices: list[dict], usage_: dict) -> dict[str, Any]:
        return {"id": self.id, "object": self.kind, "created": self.created, "model": self.model,
                "choices": choices, "usage": usage_}

    def chunk(self, choices: list[dict], usage_: dict | None = None) -> dict[str, Any]:
        kind = "text_completion" if self.kind == "text_completion" else "chat.completion.chunk"
        out = {"id": self.id, "object": kind, "created": self.created, "model": self.model, "choices": choices}
        if usage_ is not None:
            out["usage"] = usage_
        return out


class TextStream:
    """The visible text of one choice as its tokens arrive. Decoding is incremental, as vLLM does
    it: decode a short window of recent tokens and keep what the newest ones added; a window that
    ends in a partial UTF-8 character waits for the next token. The text is cut at the first stop
    string (which is not shown); until the choice ends, a tail that could begin one is held back."""

    def __init__(self, tokenizer, stop: Sequence[str], skip_special_tokens: bool = True):
        self.tokenizer, self.stop, self.skip = tokenizer, tuple(stop), skip_special_tokens
        self.longest = max((len(s) for s in self.stop), default=0)
        self.ids: list[int] = []
        self.decoded = ""  # the text of ids[:_read]
        self._prefix = self._read = 0  # the window is ids[_prefix:]; ids[_prefix:_read] already decoded
        self.sent = 0  # characters already handed out
        self.text = ""  # the text handed out so far (all of it once the choice has finished)
        self.stopped = False  # a stop string was found

    def feed(self, new_ids: Sequence[int], finished: bool) -> str:
        """Add tokens; return the newly visible text. Sets `stopped` when a stop string appears."""
        self.ids.extend(new_ids)
        searched = len(self.decoded)
        window = self.tokenizer.decode(self.ids[self._prefix:], skip_special_tokens=self.skip)
        done = self.tokenizer.decode(self.ids[self._prefix : self._read], skip_special_tokens=self.skip)
        if finished or (len(window) > len(done) and not window.endswith("\ufffd")):
            self.decoded += window[len(done):]
            self._prefix, self._read = self._read, len(self.ids)
        start = max(0, searched - self.longest + 1)  # a new match ends in the new text
        hits = [i for i in (self.decoded.find(s, start) for s in self.stop) if i >= 0]
        text = self.decoded
        if hits:
            text, self.stopped, finished = text[: min(hits)], True, True
        if not finished:
            held = max((k for s in self.stop for k in range(1, len(s)) if text.endswith(s[:k])), default=0)
            text = text[: len(text) - held]
        delta = text[self.sent:] if len(text) > self.sent else ""
        if len(text) >= self.sent:
            self.sent, self.text = len(text), text
        return delta

    def token_strings(self, ids: Sequence[int], as_ids: bool) -> list[str]:
        if as_ids:
            return [f"token_id:{i}" for i in ids]
        return [self.tokenizer.decode([i], skip_special_tokens=False) for i in ids]


class Choice:
    """One choice of one HTTP request: its engine params and what has come back so far."""

    def __init__(self, index: int, prompt: list[int], params: SamplingParams, text: TextStream):
        self.index, self.prompt, self.params, self.text = index, prompt, params, text
        self.ids: list[int] = []
        self.logprobs: list[float] = []
        self.finish: str | None = None
        self.offset = 0  # text_offset of the next logprob token
        self.handle: Any = None  # the engine runner's handle


def make_choices(req: _Common, prompts: list[list[int]], max_tokens: int | None, *, limit: int | None, vocab: int,
                 eos: Sequence[int], tokenizer) -> list[Choice]:
    """n choices per prompt (index = prompt * n + j), after the prompt and length checks."""
    choices = []
    for prompt in prompts:
        if not prompt:
            raise RequestError("prompt must not be empty", "prompt")
        if min(prompt) < 0 or max(prompt) >= vocab:
            raise RequestError(f"prompt has a token id outside the vocabulary [0, {vocab})", "prompt")
        if max_tokens is not None and max_tokens < 1:
            raise RequestError(f"max_tokens must be >= 1, got {max_tokens}", "max_tokens")
        if limit is None and max_tokens is None:
            raise RequestError("max_tokens is required: the model has no known context length", "max_tokens")
        wanted = max_tokens if max_tokens is not None else limit - len(prompt)
        if limit is not None and len(prompt) + max(wanted, 1) > limit:
            raise RequestError(
                f"This model's maximum context length is {limit} tokens; the request has {len(prompt)} prompt "
                f"tokens and asks for {max(wanted, 0)} completion tokens",
                "max_tokens" if max_tokens is not None and len(prompt) < limit else "prompt",
                code="context_length_exceeded")
        for j in range(req.n):
            try:
                params = sampling_params(req, wanted, eos, j)
            except ValueError as exc:
                raise RequestError(str(exc)) from None
            choices.append(Choice(len(choices), list(prompt), params, TextStream(tokenizer, params.stop,
                                                                                 req.skip_special_tokens)))
    return choices


def completion_prompts(prompt: Any, tokenizer) -> list[list[int]]:
    """A completions `prompt` (string, token ids, or a list of either) as token-id lists."""
    if isinstance(prompt, str) or (prompt and all(isinstance(x, int) for x in prompt)):
        prompt = [prompt]
    prompts = list(prompt) or [[]]
    return [tokenizer(x)["input_ids"] if isinstance(x, str) else list(x) for x in prompts]


def logprob_object(req: Any, c: Choice, ids: list[int], lps: list[float], chat: bool) -> dict | None:
    """The `logprobs` of a response or chunk for tokens `ids` of choice `c`, or None if not asked."""
    if (chat and not req.logprobs) or (not chat and req.logprobs is None):
        return None
    tokens = c.text.token_strings(ids, req.return_tokens_as_token_ids)
    if chat:
        return chat_logprobs(tokens, lps, req.top_logprobs or 0)
    obj = completion_logprobs(tokens, lps, c.offset)
    c.offset += sum(len(t) for t in tokens)
    return obj


def error_of(exc: BaseException) -> RequestError:
    """An engine's exception as an error body: ValueError is the request's (400), the rest 500."""
    if isinstance(exc, RequestError):
        return exc
    if isinstance(exc, ValueError):
        return RequestError((str(exc) or "bad request").splitlines()[0])
    return RequestError(f"engine failed: {type(exc).__name__}: {exc}".splitlines()[0], status=500, type="server_error")


def limits(engine: Any, tokenizer: Any, max_model_len: int | None, vocab_size: int | None):
    """Prompt + completion token limit and vocabulary size: given, else from the engine's model config."""
    cfg = getattr(getattr(engine, "model", None), "config", None)
    if max_model_len is None:
        max_model_len = getattr(engine, "max_model_len", None) or getattr(cfg, "max_position_embeddings", None)
    if vocab_size is None:
        vocab_size = getattr(engine, "vocab_size", None) or getattr(cfg, "vocab_size", None) or len(tokenizer)
    return max_model_len, int(vocab_size)


def default_eos_ids(engine: Any, tokenizer: Any) -> tuple[int, ...]:
    """The tokenizer's eos and the model's generation-config eos ids: where a reply ends."""
    ids: list[int] = []
    gen = getattr(getattr(engine, "model", None), "generation_config", None)
    for value in (getattr(tokenizer, "eos_token_id", None), getattr(gen, "eos_token_id", None)):
        ids.extend(value if isinstance(value, (list, tuple)) else [] if value is None else [value])
    return tuple(dict.fromkeys(int(i) for i in ids))


def load_safetensors(files: list[Any]) -> dict:
    """Every tensor of these .safetensors files in one state dict."""
    from safetensors.torch import load_file

    state: dict = {}
    for f in files:
        state.update(load_file(str(f)))
    return state
