"""Run untrusted code: `LocalSandbox` (bubblewrap on this host, bounded pool) and its types.

    sandbox = LocalSandbox(max_workers=2)
    result = sandbox.run(RunRequest(code="print(1 + 1)"))  # result.run.stdout == "2\\n"

What isolation protects against, and what not, is stated in `isolation.py`; how each
status is decided in `executor.py`; queueing and metrics in `pool.py`.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from typing import Literal

from posttrain.sandbox.executor import Settings, Toolchain, execute
from posttrain.sandbox.isolation import BwrapIsolation, NoIsolation
from posttrain.sandbox.pool import Pool
from posttrain.sandbox.types import (
    LANGUAGES,
    CommandResult,
    Language,
    RunRequest,
    RunResult,
    Sandbox,
    SandboxError,
    Status,
)
from posttrain.sandbox.workdir import validate

__all__ = [
    "LANGUAGES", "CommandResult", "Language", "LocalSandbox", "RunRequest", "RunResult",
    "Sandbox", "SandboxError", "Settings", "Status",
]  # fmt: skip

log = logging.getLogger(__name__)


class LocalSandbox:
    """Sandboxed runs on this host through a bounded pool (implements `Sandbox`).

    isolation="bwrap" (default) needs a working bubblewrap and refuses to start without
    one; isolation="none" runs programs unisolated (rlimits and timeouts only) and logs a
    warning on every run. `bwrap`, `uid`, `gid` and `settings` are for tests and operators.
    """

    def __init__(
        self,
        max_workers: int | None = os.cpu_count(),
        max_queue: int = 64,
        isolation: Literal["bwrap", "none"] = "bwrap",
        *,
        settings: Settings | None = None,
        bwrap: str = "bwrap",
        uid: int = 65534,
        gid: int = 65534,
    ) -> None:
        if isolation not in ("bwrap", "none"):
            raise ValueError(f"isolation: unknown {isolation!r} (expected 'bwrap' or 'none')")
        self.settings = settings or Settings()
        self.tools = Toolchain.find()
        if isolation == "bwrap":
            self._isolation: BwrapIsolation | NoIsolation = BwrapIsolation(bwrap=bwrap, uid=uid, gid=gid)
            try:
                self._isolation.check()
            except SandboxError:
                self._isolation.close()
                raise
        else:
            self._isolation = NoIsolation()
            log.warning('LocalSandbox(isolation="none"): programs will run UNISOLATED on this host')
        self.isolation = isolation
        self._work_root = tempfile.mkdtemp(prefix="posttrain-sandbox-", dir=self.settings.work_root)
        os.chmod(self._work_root, 0o711)  # the sandbox uid must traverse it to reach its own dir
        self._pool = Pool(self._execute, max_workers=max_workers or 1, max_queue=max_queue)

    @property
    def work_root(self) -> str:
        """Host directory under which each run gets (and afterwards loses) its work dir."""
        return self._work_root

    @property
    def sandbox_uid(self) -> int | None:
        """Host uid the programs run as (None with isolation="none")."""
        return getattr(self._isolation, "uid", None)

    def _execute(self, request: RunRequest) -> RunResult:
        if self.isolation == "none":
            log.warning('sandbox run with isolation="none": %s code runs unisolated', request.language)
        return execute(request, self._isolation, self.tools, self.settings, self._work_root)

    def run(self, request: RunRequest) -> RunResult:
        """Run one request; blocks while waiting for a slot. ValueError for a bad request,
        SandboxError when the queue is full or the sandbox itself fails."""
        validate(request)
        return self._pool.run(request)

    async def arun(self, request: RunRequest) -> RunResult:
        """`run` for asyncio callers: waits for a slot without blocking the event loop."""
        validate(request)
        return await self._pool.arun(request)

    def metrics(self) -> dict:
        """Counters and latencies: runs, in_flight, queued, queue_wait_s_p50, run_s_p50,
        violations (kind -> count), ..."""
        return {"isolation": self.isolation, **self._pool.metrics()}

    def close(self) -> None:
        self._pool.close()
        self._isolation.close()
        shutil.rmtree(self._work_root, ignore_errors=True)

    def __enter__(self) -> "LocalSandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
