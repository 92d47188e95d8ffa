"""The sandbox over HTTP, speaking SandboxFusion's API (see `fusion.py` for the JSON).

    GET  /v1/ping      -> "pong"
    POST /run_code     -> SandboxFusion RunCodeResponse
    GET  /v1/metrics   -> the sandbox's `metrics()` (when it has one)

HTTP status codes: 200 for every run that happened, whatever the user code did
(`Success` / `Failed`) and for infrastructure faults (`SandboxError`, as SandboxFusion
does); 400 for a body that is not JSON; 422 for a request with a bad field (the
message names it); 413 for a body over `max_body_bytes`.

The server adds no isolation of its own: it validates paths and limits, then hands the
request to the sandbox it wraps. It has no authentication: bind it to 127.0.0.1 or a
private network, never to an address the untrusted code's users can reach.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from posttrain.sandbox.fusion import RequestError, parse_request, result_to_json, sandbox_error_json
from posttrain.sandbox.types import RunRequest, RunResult, Sandbox, SandboxError

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 << 20


class _BodyTooLarge(Exception):
    pass


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _BodyTooLarge
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def _error(status_code: int, detail: str) -> JSONResponse:
    return JSONResponse(status_code=status_code, content={"detail": detail})


def create_app(
    sandbox: Sandbox,
    *,
    max_body_bytes: int = MAX_BODY_BYTES,
    default_memory_limit_mb: int = 512,
    max_threads: int = 64,
    pod_name: str | None = None,
) -> FastAPI:
    """A FastAPI app serving `sandbox`. The caller keeps ownership of `sandbox` (closes it).

    A sandbox with `async arun(request)` is awaited directly; otherwise its blocking
    `run(request)` goes to a pool of `max_threads` threads, so the event loop keeps
    answering while programs run. `memory_limit_MB` <= 0 (SandboxFusion's default -1)
    means `default_memory_limit_mb`.
    """
    pod = pod_name if pod_name is not None else os.environ.get("MY_POD_NAME")
    pool = ThreadPoolExecutor(max_workers=max_threads, thread_name_prefix="sandbox-http")
    arun = getattr(sandbox, "arun", None)

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        try:
            yield
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(title="posttrain sandbox", lifespan=lifespan)

    async def execute(request: RunRequest) -> RunResult:
        if arun is not None:
            return await arun(request)
        return await asyncio.get_running_loop().run_in_executor(pool, sandbox.run, request)

    @app.get("/v1/ping")
    async def ping() -> str:
        return "pong"

    @app.get("/v1/metrics")
    async def metrics() -> Any:
        get = getattr(sandbox, "metrics", None)
        return get() if get is not None else {}

    @app.post("/run_code")
    async def run_code(http_request: Request) -> JSONResponse:
        try:
            body = await _read_body(http_request, max_body_bytes)
        except _BodyTooLarge:
            return _error(413, f"request body: larger than the limit of {max_body_bytes} bytes")
        try:
            payload = _json_loads(body)
        except ValueError as e:
            return _error(400, f"request body: not valid JSON ({e})")
        try:
            request = parse_request(payload, default_memory_limit_mb=default_memory_limit_mb)
        except RequestError as e:
            return _error(422, str(e))
        try:
            result = await execute(request)
        except SandboxError as e:
            log.warning("sandbox error: %s", e)
            return JSONResponse(sandbox_error_json(f"sandbox error: {e}", pod_name=pod))
        except Exception as e:  # a bug below us is still not the user code's fault
            log.exception("sandbox raised unexpectedly")
            return JSONResponse(sandbox_error_json(f"internal error: {type(e).__name__}: {e}", pod_name=pod))
        return JSONResponse(result_to_json(result, pod_name=pod))

    return app


def _json_loads(body: bytes) -> Any:
    def refuse_constant(name: str) -> Any:
        raise ValueError(f"{name} is not a JSON number")

    try:
        return json.loads(body, parse_constant=refuse_constant)
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8: {e.reason}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{e.msg} at line {e.lineno} column {e.colno}") from None


def serve(
    host: str = "127.0.0.1",
    port: int = 8080,
    *,
    workers: int | None = None,
    max_queue: int = 64,
    isolation: str = "bwrap",
    sandbox: Sandbox | None = None,
    log_level: str = "info",
) -> None:
    """Serve `sandbox` (by default a new `LocalSandbox`) with uvicorn until interrupted.

    `workers` and `max_queue` size the LocalSandbox (programs run at once, and waiting);
    the HTTP side is one asyncio process, which is not the bottleneck.
    """
    import uvicorn

    owned = sandbox is None
    if sandbox is None:
        from posttrain.sandbox import LocalSandbox

        kwargs: dict[str, Any] = {"max_queue": max_queue, "isolation": isolation}
        if workers is not None:
            kwargs["max_workers"] = workers
        sandbox = LocalSandbox(**kwargs)
    try:
        uvicorn.run(create_app(sandbox), host=host, port=port, log_level=log_level)
    finally:
        if owned:
            sandbox.close()  # type: ignore[attr-defined]


class BackgroundServer:
    """Run an app with uvicorn in a daemon thread on 127.0.0.1 (one-box mode, tests).

        with BackgroundServer(create_app(sandbox)) as url:
            RemoteSandbox(url).run(...)
    """

    def __init__(self, app: FastAPI, host: str = "127.0.0.1", port: int = 0):
        import uvicorn

        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self.host, self.port = self._sock.getsockname()[:2]
        self.url = f"http://{self.host}:{self.port}"
        config = uvicorn.Config(app, log_level="warning", lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, name="sandbox-server", daemon=True
        )

    def start(self, timeout: float = 10.0) -> str:
        self._thread.start()
        waiter = threading.Event()
        for _ in range(int(timeout / 0.01)):
            if self._server.started or not self._thread.is_alive():
                break
            waiter.wait(0.01)
        if not self._server.started:
            self.stop()
            raise SandboxError(f"sandbox server on {self.url} did not start within {timeout} s")
        return self.url

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self._sock.close()

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
