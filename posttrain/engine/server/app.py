"""An OpenAI-compatible HTTP server over any rollout `Engine`: `build_app` and `serve`.

    GET  /v1/models, /v1/models/{id}, /health
    POST /v1/completions        prompt: a string, a list of token ids, or a list of either
    POST /v1/chat/completions   messages through the tokenizer's chat template (add_generation_prompt)
    POST /update_weights_from_disk  {"model_path": dir, "version": N} (SGLang's endpoint; only with
                                    enable_weight_updates: loads every *.safetensors in dir)

Fields, extensions and the logprobs caveat are listed in `server_api`. Bad requests get OpenAI
error bodies (400; unknown model 404) and the server keeps serving.

One thread owns the engine (`EngineRunner`). A `SteppingEngine` gets every request as it arrives
(`add_request`) and is stepped while any is unfinished, each step's tokens going straight to the
request's asyncio queue (continuous batching; a stop string found here or a client that goes away
aborts the request). A plain `Engine` gets what was queued within `batch_window_s` of the first
request as one `generate` call; each request's tokens then arrive at once, and a request whose
client left before its batch started is dropped. A failing batch is rerun request by request, so
only the request that breaks the engine fails.
"""

from __future__ import annotations

import asyncio
import json
import logging
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Sequence

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException

from posttrain.engine.server import api
from posttrain.engine.protocol import Engine, StepOutput
from posttrain.engine.runner import EngineRunner

log = logging.getLogger(__name__)


def _sse(obj: Any) -> str:
    return f"data: {json.dumps(obj)}\n\n"


def build_app(
    engine: Engine, tokenizer: Any, model_name: str, *, max_model_len: int | None = None,
    vocab_size: int | None = None, eos_token_ids: Sequence[int] | None = None, batch_window_s: float = 0.005,
    enable_weight_updates: bool = False,
):
    """A FastAPI app serving `engine` as `model_name`. `max_model_len` (prompt + completion) and
    `vocab_size` default to the engine's model config; `eos_token_ids` to `default_eos_ids`.
    The engine thread starts now (`app.state.runner`) and stops when the app shuts down."""
    runner = EngineRunner(engine, batch_window_s=batch_window_s)
    limit, vocab = api.limits(engine, tokenizer, max_model_len, vocab_size)
    eos = tuple(eos_token_ids) if eos_token_ids is not None else api.default_eos_ids(engine, tokenizer)

    @asynccontextmanager
    async def lifespan(app):
        yield
        runner.close()

    app = FastAPI(title="posttrain", lifespan=lifespan)
    app.state.runner = runner

    @app.exception_handler(api.RequestError)
    async def _request_error(request, exc: api.RequestError):
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(HTTPException)
    async def _http_error(request, exc: HTTPException):
        kind = "invalid_request_error" if exc.status_code < 500 else "server_error"
        return JSONResponse(api.RequestError(str(exc.detail), type=kind).body(), status_code=exc.status_code)

    async def json_body(request: Request) -> Any:
        try:
            return json.loads(await request.body())
        except ValueError as exc:
            raise api.RequestError(f"malformed JSON body: {exc}") from None

    async def parse(request: Request, model_cls):
        req = api.parse(model_cls, await json_body(request))
        if req.model != model_name:
            raise api.RequestError(f"The model `{req.model}` does not exist (this server serves `{model_name}`)",
                                   "model", status=404, code="model_not_found")
        return req

    def choices_for(req, prompts: list[list[int]], max_tokens: int | None) -> list[api.Choice]:
        return api.make_choices(req, prompts, max_tokens, limit=limit, vocab=vocab, eos=eos, tokenizer=tokenizer)

    def start(choices: list[api.Choice]) -> asyncio.Queue:
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()
        for c in choices:
            def sink(ev, i=c.index):
                try:
                    loop.call_soon_threadsafe(events.put_nowait, (i, ev))
                except RuntimeError:  # the loop has closed (server shutting down): nobody is waiting
                    pass
            c.handle = runner.submit(c.prompt, c.params, sink)
        return events

    def absorb(c: api.Choice, ev: StepOutput | BaseException) -> tuple[list[int], list[float], str]:
        """Take one engine event for a choice; returns its new ids, logprobs and visible text."""
        if isinstance(ev, BaseException):
            raise api.error_of(ev)
        c.ids += ev.token_ids
        c.logprobs += ev.logprobs
        delta = c.text.feed(ev.token_ids, ev.finished)
        if c.text.stopped:
            c.finish = "stop"
            if not ev.finished:
                runner.cancel(c.handle)
        elif ev.finished:
            c.finish = ev.finish_reason or "stop"
        return list(ev.token_ids), list(ev.logprobs), delta

    def cancel_unfinished(choices: list[api.Choice]) -> None:
        for c in choices:
            if c.finish is None and c.handle is not None:
                runner.cancel(c.handle)

    async def collect(request: Request, choices: list[api.Choice]) -> bool:
        """Run the choices to their end; False if the client went away first (all aborted)."""
        events, loop = start(choices), asyncio.get_running_loop()
        check_at = loop.time() + 0.5
        try:
            while any(c.finish is None for c in choices):
                try:
                    i, ev = await asyncio.wait_for(events.get(), 0.5)
                    if choices[i].finish is None:
                        absorb(choices[i], ev)
                except asyncio.TimeoutError:
                    pass
                if loop.time() >= check_at:  # tokens may keep coming: look at the client every 0.5 s
                    check_at = loop.time() + 0.5
                    if await request.is_disconnected():
                        return False
            return True
        finally:
            cancel_unfinished(choices)

    async def respond(request: Request, req, prompts: list[list[int]], choices: list[api.Choice], chat: bool):
        env = api.Envelope("chat.completion" if chat else "text_completion", model_name)
        prompt_tokens = sum(len(p) for p in prompts)
        if not req.stream:
            if not await collect(request, choices):
                return JSONResponse(api.RequestError("client disconnected").body(), status_code=499)
            make = api.chat_choice if chat else api.completion_choice
            out = [make(c.index, c.text.text, c.finish, c.ids, c.prompt,
                        api.logprob_object(req, c, c.ids, c.logprobs, chat)) for c in choices]
            return JSONResponse(env.full(out, api.usage(prompt_tokens, sum(len(c.ids) for c in choices))))

        async def stream():
            events = start(choices)
            try:
                if chat:
                    yield _sse(env.chunk([api.chat_delta_choice(c.index, {"role": "assistant", "content": ""},
                                                                None, [], None) for c in choices]))
                while any(c.finish is None for c in choices):
                    i, ev = await events.get()
                    c = choices[i]
                    if c.finish is not None:
                        continue
                    ids, lps, delta = absorb(c, ev)
                    lp = api.logprob_object(req, c, ids, lps, chat)
                    if chat:
                        piece = api.chat_delta_choice(c.index, {"content": delta} if delta else {}, c.finish, ids, lp)
                    else:
                        piece = api.completion_choice(c.index, delta, c.finish, ids, None, lp)
                    yield _sse(env.chunk([piece]))
                if req.stream_options and req.stream_options.include_usage:
                    yield _sse(env.chunk([], api.usage(prompt_tokens, sum(len(c.ids) for c in choices))))
            except api.RequestError as exc:
                yield _sse(exc.body())
            finally:
                cancel_unfinished(choices)
            yield "data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    def model_card() -> dict[str, Any]:
        return {"id": model_name, "object": "model", "created": 0, "owned_by": "posttrain", "max_model_len": limit}

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [model_card()]}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str):
        if model_id != model_name:
            raise api.RequestError(f"The model `{model_id}` does not exist", "model", status=404,
                                   code="model_not_found")
        return model_card()

    @app.post("/v1/completions")
    async def completions(request: Request):
        req = await parse(request, api.CompletionRequest)
        api.check_completion(req)
        prompts = api.completion_prompts(req.prompt, tokenizer)
        return await respond(request, req, prompts, choices_for(req, prompts, req.max_tokens), chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        req = await parse(request, api.ChatRequest)
        api.check_chat(req)
        if getattr(tokenizer, "chat_template", None) is None:
            raise api.RequestError("this model's tokenizer has no chat template; use /v1/completions", "messages")
        try:
            enc = tokenizer.apply_chat_template(api.chat_messages(req.messages), add_generation_prompt=True,
                                                tokenize=True, return_dict=True)
        except api.RequestError:
            raise
        except Exception as exc:  # noqa: BLE001 - template errors are the request's
            raise api.RequestError(f"messages: the chat template failed: {exc}".splitlines()[0], "messages") from None
        prompts = [list(enc["input_ids"])]
        max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
        return await respond(request, req, prompts, choices_for(req, prompts, max_tokens), chat=True)

    @app.post("/update_weights_from_disk")
    async def update_weights_from_disk(request: Request):
        if not enable_weight_updates:
            raise api.RequestError("weight updates are off on this server (start it with enable_weight_updates)",
                                   status=404, code="not_enabled")
        body = await json_body(request)
        path = body.get("model_path") if isinstance(body, dict) else None
        if not isinstance(path, str):
            raise api.RequestError("model_path (a directory of .safetensors files) is required", "model_path")
        version = body.get("version", engine.version + 1)
        if not isinstance(version, int) or isinstance(version, bool):
            raise api.RequestError("version must be an integer", "version")
        files = sorted(Path(path).glob("*.safetensors"))
        if not files:
            raise api.RequestError(f"no .safetensors files in {path}", "model_path")
        state = await asyncio.to_thread(api.load_safetensors, files)
        try:
            await asyncio.wrap_future(runner.call(lambda e: e.update_weights(state, version)))
        except ValueError as exc:
            raise api.RequestError(str(exc).splitlines()[0], "model_path") from None
        return {"success": True, "message": f"loaded {len(state)} tensors from {path}", "version": version}

    return app


# `posttrain serve --mode`: the paged engine's options per mode. fast (interactive use, one or a
# few sequences at a time): int8 weight-only matmuls (a token reads 1 byte per weight instead of
# 4; quant.py, falling back to exact weights with a warning where the kernel is missing) and
# n-gram speculative decoding; standard (hard, long reasoning): the checkpoint's exact weights,
# no drafts. Speed and quality cost of fast (greedy agreement with standard, logprob error
# against fp32) are in docs/benchmarks.md.
SERVE_MODES: dict[str, dict[str, Any]] = {
    "fast": {"weights": "int8-weight-only", "speculative": "ngram"},
    "standard": {"weights": "exact", "speculative": None},
}
# The same modes on the llamacpp engine (llama.cpp behind this server): the GGUF's weight type,
# the same precision class as the paged engine's mode (exact fp32 / 8-bit weights). The CLI exports
# the model to it (models/ sits above this layer) and passes the file as the engine's `gguf` option.
LLAMACPP_MODES: dict[str, dict[str, Any]] = {"fast": {"dtype": "q8_0"}, "standard": {"dtype": "f32"}}


def serve(model_path: str, host: str = "127.0.0.1", port: int = 8000, engine: str = "paged", *,
          model_name: str | None = None, enable_weight_updates: bool = False, log_level: str = "info",
          mode: str = "fast", **engine_options: Any) -> None:
    """Load the tokenizer and `ENGINES[engine]` for `model_path` and serve it until interrupted.
    The model is served under `model_name` (default: `model_path` as given, as vLLM does).
    `mode` picks the paged engine's options (`SERVE_MODES`; `engine_options` win); other
    engines serve their own way whatever the mode (the llamacpp engine's GGUF file, which the CLI
    picks by mode from `LLAMACPP_MODES`, comes in `engine_options`)."""
    import uvicorn

    from posttrain.core.errors import ConfigError
    from posttrain.engine.registry import ENGINES
    from posttrain.core.hf import load_tokenizer

    if engine not in ENGINES:
        raise ConfigError(f"serve: engine {engine!r} is not available; choose one of {sorted(ENGINES)}")
    if mode not in SERVE_MODES:
        raise ConfigError(f"serve: mode {mode!r} is not one of {', '.join(SERVE_MODES)}")
    if engine == "paged":
        engine_options = {**SERVE_MODES[mode], **engine_options}
    tokenizer = load_tokenizer(model_path)
    eng = ENGINES[engine](model_path, tokenizer, **engine_options)
    app = build_app(eng, tokenizer, model_name or model_path, enable_weight_updates=enable_weight_updates)
    uvicorn.run(app, host=host, port=port, log_level=log_level)
