"""`RemoteSandbox`: the `Sandbox` protocol over HTTP, against our server or any
SandboxFusion deployment.

Retries are for infrastructure faults only: connection errors and timeouts, HTTP 5xx,
408 and 429, a response that is not SandboxFusion JSON, and `status: SandboxError`.
A run whose user code failed (`status: Failed`) is a result, returned at once and never
retried: running it again would only spend the sandbox twice. A request the server
refuses (other 4xx, e.g. a language it does not know) raises ValueError at once.
After `retries` retries the last fault is raised as SandboxError.

Note that a retried request may run the code more than once (a timeout does not say
whether the run happened), which is harmless for the pure programs verifiers run.
"""

from __future__ import annotations

import asyncio
import random
import time
import weakref
from typing import Any

import httpx

from posttrain.core.errors import one_line
from posttrain.sandbox.fusion import request_to_json, result_from_json
from posttrain.sandbox.types import RunRequest, RunResult, SandboxError

_RETRY_HTTP = {408, 429}
_SLACK_S = 30.0  # added to the request's own timeouts for the HTTP timeout


class _Retryable(Exception):
    """An infrastructure fault worth another attempt."""


class RemoteSandbox:
    """Run requests on a SandboxFusion-compatible server at `base_url`.

    base_url: the server root, e.g. "http://127.0.0.1:8080" (a URL ending in
        "/run_code", as verl configures it, is accepted too).
    timeout: seconds for one HTTP attempt; None means the request's compile and run
        timeouts plus 30 s.
    retries: further attempts after the first, on infrastructure faults only.
    backoff: seconds before the first retry, doubling each time up to `max_backoff`,
        with jitter (each wait is 50-100 % of that).
    """

    def __init__(
        self,
        base_url: str,
        timeout: float | None = None,
        retries: int = 3,
        *,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
    ):
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url: must start with http:// or https://, got {base_url!r}")
        if retries < 0:
            raise ValueError(f"retries: must be >= 0, got {retries}")
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout: must be positive, got {timeout}")
        base = base_url.rstrip("/")
        if base.endswith("/run_code"):
            base = base[: -len("/run_code")]
        self.base_url = base
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._client = httpx.Client()
        self._aclients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary()
        )

    # ------------------------------------------------------------ public API

    def run(self, request: RunRequest) -> RunResult:
        body, timeout = request_to_json(request), self._timeout_for(request)
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self._delay(attempt))
            try:
                response = self._client.post(f"{self.base_url}/run_code", json=body, timeout=timeout)
                return self._outcome(response)
            except httpx.RequestError as e:
                last = f"{type(e).__name__}: {e}"
            except _Retryable as e:
                last = str(e)
        raise self._exhausted(last)

    async def arun(self, request: RunRequest) -> RunResult:
        body, timeout = request_to_json(request), self._timeout_for(request)
        client = self._aclient()
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(self._delay(attempt))
            try:
                response = await client.post(f"{self.base_url}/run_code", json=body, timeout=timeout)
                return self._outcome(response)
            except httpx.RequestError as e:
                last = f"{type(e).__name__}: {e}"
            except _Retryable as e:
                last = str(e)
        raise self._exhausted(last)

    def ping(self, timeout: float = 5.0) -> bool:
        """True when the server answers `GET /v1/ping` with "pong"."""
        try:
            response = self._client.get(f"{self.base_url}/v1/ping", timeout=timeout)
            return response.status_code == 200 and response.json() == "pong"
        except (httpx.RequestError, ValueError):
            return False

    def close(self) -> None:
        """Close the connection pool; async pools are closed by `aclose()` or end with their loop."""
        self._client.close()
        self._aclients.clear()

    async def aclose(self) -> None:
        client = self._aclients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()
        self.close()

    def __enter__(self) -> "RemoteSandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ internals

    def _timeout_for(self, request: RunRequest) -> httpx.Timeout:
        total = self.timeout or request.compile_timeout + request.run_timeout + _SLACK_S
        return httpx.Timeout(total, connect=min(total, 10.0))

    def _delay(self, attempt: int) -> float:
        base = min(self.max_backoff, self.backoff * 2 ** (attempt - 1))
        return base * (0.5 + random.random() / 2)

    def _aclient(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        client = self._aclients.get(loop)
        if client is None or client.is_closed:
            client = self._aclients[loop] = httpx.AsyncClient()
        return client

    def _exhausted(self, last: str) -> SandboxError:
        attempts = self.retries + 1
        word = "attempt" if attempts == 1 else "attempts"
        return SandboxError(f"sandbox at {self.base_url} failed after {attempts} {word}: {one_line(last)}")

    def _outcome(self, response: httpx.Response) -> RunResult:
        """The RunResult in `response`; raise _Retryable for infrastructure faults and
        ValueError for a request the server refused."""
        code = response.status_code
        if code >= 500 or code in _RETRY_HTTP:
            raise _Retryable(f"HTTP {code}: {one_line(response.text)}")
        if code >= 400:
            raise ValueError(f"sandbox at {self.base_url} refused the request (HTTP {code}): {_detail(response)}")
        try:
            status, message, result = result_from_json(response.json())
        except ValueError as e:  # includes JSON decode errors
            raise _Retryable(f"malformed response (HTTP {code}): {e}") from None
        if result is None:
            raise _Retryable(f"SandboxError: {message}")
        return result


def _detail(response: httpx.Response) -> str:
    try:
        data: Any = response.json()
    except ValueError:
        return one_line(response.text)
    if isinstance(data, dict) and "detail" in data:
        return one_line(str(data["detail"]))
    return one_line(response.text)
