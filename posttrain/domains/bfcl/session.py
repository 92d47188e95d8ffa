"""One long-lived BFCL API runner per episode, in the bubblewrap sandbox: a step's calls in, their results out.

    session = BfclSession(task.reference, isolation=shared_isolation(), cpu_seconds=65)
    outcomes = await session.call([{"name": "cd", "arguments": {"folder": "temp"}}], timeout=30.0)
    # -> [{"ok": True, "kind": "", "result": '{"current_working_directory": "temp"}'}]
    await session.close()                        # the sandbox is gone, nothing of it survives

The runner is bfcl_runner.py --serve (the sandbox's system Python), started on the first call with
`spawn_sandboxed` / `connect_pipes` / `stop_sandbox` of domains/terminal/session.py, the lifecycle of
the terminal env's shell: no network, its own pid namespace, rlimits (MEMORY_MB of address space,
`cpu_seconds` for the process's whole life, the sandbox's usual process, file and fd counts). It
builds the task's instances once (BFCL's `_load_scenario`, as BFCL's executor keeps instances for
a whole conversation) and then answers one JSON line per step. Its files (the runner, BFCL's class
sources, mpmath's pure-Python source for MathAPI) are written once per host process into a
directory bound read-only at /bfcl; each episode's /work is an empty directory of its own.

Decisions:
- `history` is the calls that ran and were kept, in order, with their results. A runner that must
  be replaced gets a fresh process that replays `history` in one request, and its results must be
  the ones the model saw (the classes are deterministic): so the instances always hold exactly
  what the kept calls made of them, and a saved state replays anywhere (domains/bfcl/env.py scores it so).
- Past `timeout`, on a reply over READ_LIMIT_BYTES, or a MemoryError while the runner shows a
  result, the step's calls are at fault: StepLimitError, the process is killed, the calls are not
  added to `history`, and the next call starts a fresh runner replaying `history` first.
- A runner that dies, prints something that is not its reply, or reports itself broken is
  restarted by replay once and the step's calls are sent again; when that fails as well, or a
  start or replay fails, it is the infrastructure's fault: InfraError (the episode is retried).
- The calls are data (names, JSON arguments) the runner looks up by name; nothing evaluates them.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Any, Mapping

from posttrain.core.fsio import atomic_file
from posttrain.envs.env import InfraError
from posttrain.domains.terminal.env import work_root
from posttrain.domains.terminal.session import (
    START_TIMEOUT_S, connect_pipes, new_work_dir, spawn_sandboxed, stop_sandbox,
)
from posttrain.sandbox.executor import Settings, Toolchain
from posttrain.sandbox.isolation import BwrapIsolation, Limits
from posttrain.sandbox.workdir import remove_work_dir
from posttrain.domains.bfcl.data import CLASS_FILES, STATELESS_CLASSES, class_sources, mpmath_files

MEMORY_MB = 1024
REPLAY_TIMEOUT_S = 30.0  # a restarted runner's replay of the kept calls, at least
READ_LIMIT_BYTES = 16 << 20  # one reply line at most (the batch runs' output limit)
LIB_MOUNT = "/bfcl"
RUNNER_PATH = Path(__file__).with_name("runner.py")

_lib_lock = threading.Lock()
_lib: dict[str, Any] = {"dir": None, "mpmath": False}


class StepLimitError(Exception):
    """The step's calls ran past the time limit or hit the memory or output limit (their fault)."""


class _Broken(Exception):
    """The runner died or answered something that is not its reply."""


def lib_dir(mpmath: bool) -> str:
    """The host directory bound at /bfcl: the runner and BFCL's class sources (+ mpmath), written once."""
    with _lib_lock:
        if _lib["dir"] is None:
            path = tempfile.mkdtemp(prefix="bfcl-lib-", dir=work_root())
            files = {"bfcl_runner.py": RUNNER_PATH.read_text(encoding="utf-8"), **class_sources(list(CLASS_FILES))}
            _write_readable(path, files)
            _lib["dir"] = path
        if mpmath and not _lib["mpmath"]:
            _write_readable(_lib["dir"], mpmath_files())
            _lib["mpmath"] = True
        return _lib["dir"]


def _write_readable(root: str, files: Mapping[str, str]) -> None:
    """Files readable (not writable) by the sandbox uid, written to a temp name and renamed into place."""
    os.chmod(root, 0o755)
    for rel, text in files.items():
        full = os.path.join(root, rel)
        os.makedirs(os.path.dirname(full), mode=0o755, exist_ok=True)
        with atomic_file(full, "w", fsync=False, perms=0o644) as f:
            f.write(text)


def runner_job(reference: Mapping[str, Any]) -> dict:
    """What bfcl_runner.py needs to build a task's instances (the serve header; batch jobs add their runs)."""
    classes = list(reference["involved_classes"])
    return {"classes": classes, "modules": {c: CLASS_FILES[c] for c in classes},
            "stateless": [c for c in classes if c in STATELESS_CLASSES], "config": reference["initial_config"],
            "long_context": False}


class BfclSession:
    def __init__(self, reference: Mapping[str, Any], *, isolation: BwrapIsolation, cpu_seconds: int) -> None:
        self.isolation = isolation
        self.header = json.dumps(runner_job(reference))
        self.history: list[tuple[dict, dict]] = []  # (call, outcome) of every kept call, in order
        self.restarts = 0  # runners started after the first
        self._math = "MathAPI" in reference["involved_classes"]
        settings = Settings()
        self._limits = Limits(memory_bytes=MEMORY_MB << 20, cpu_seconds=cpu_seconds, nproc=settings.nproc,
                              fsize_bytes=settings.fsize_bytes, nofile=settings.nofile)
        self._python = Toolchain.find().python
        self._work: str | None = None
        self._proc = None
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.WriteTransport | None = None
        self._transports: list[asyncio.BaseTransport] = []
        self._started = False
        self._stale = False  # a request was cancelled mid-way: the runner's state is unknown

    async def call(self, calls: list[dict], timeout: float) -> list[dict]:
        """Run `calls` in order on the episode's instances; one outcome each (see the module docstring)."""
        await self._ensure_up(timeout)
        try:
            outcomes = await self._send_calls(calls, timeout)
        except _Broken as first:
            await self._bring_up(timeout)
            try:
                outcomes = await self._send_calls(calls, timeout)
            except _Broken as again:
                raise InfraError(f"bfcl: the API runner broke again after a restart ({again}; "
                                 f"the first time: {first})") from None
        self.history += list(zip(calls, outcomes))
        return outcomes

    async def snapshot(self) -> dict:
        """{class: {public attribute: repr}} of the live instances (bfcl_runner.py's snapshot)."""
        await self._ensure_up(REPLAY_TIMEOUT_S)
        try:
            reply = await self._exchange({"state": True}, REPLAY_TIMEOUT_S)
        except (StepLimitError, _Broken) as e:
            await self._kill()
            raise InfraError(f"bfcl: the API runner gave no snapshot ({e})") from None
        if not isinstance(reply.get("state"), dict):
            raise InfraError("bfcl: the API runner's snapshot is not an object")
        return reply["state"]

    async def close(self) -> None:
        await self._kill()
        if self._work is not None:
            remove_work_dir(self._work)
            self._work = None

    # -- internals ---------------------------------------------------------------------------
    async def _ensure_up(self, timeout: float) -> None:
        if self._stale:
            await self._kill()
        if self._proc is None:
            await self._bring_up(timeout)

    async def _bring_up(self, timeout: float) -> None:
        """A fresh runner holding exactly `history`; InfraError when it does not come up."""
        if self._python is None:
            raise InfraError("bfcl: python3 not found under /usr (the API runner needs the system Python)")
        if self._started:
            self.restarts += 1
        self._started = True
        try:
            if self._work is None:
                self._work = new_work_dir(work_root(), {}, self.isolation)
            argv = [self._python, "-E", "-s", "-B", f"{LIB_MOUNT}/bfcl_runner.py", "--serve"]
            self._proc = spawn_sandboxed(self.isolation, argv, self._work, self._limits,
                                         ro_binds=((lib_dir(self._math), LIB_MOUNT),))
        except OSError as e:
            raise InfraError(f"bfcl: could not start the API runner's sandbox: {e}") from e
        self._reader, self._writer, self._transports = await connect_pipes(self._proc, READ_LIMIT_BYTES)
        try:
            self._writer.write(self.header.encode() + b"\n")
            ready = await self._exchange(None, START_TIMEOUT_S)
            if ready != {"ready": True}:
                raise _Broken(f"its first line is {json.dumps(ready)[:200]}")
            if self.history:
                calls = [c for c, _ in self.history]
                again = await self._request({"calls": calls}, max(REPLAY_TIMEOUT_S, timeout), len(calls))
                first = next((i for i, (got, (_, seen)) in enumerate(zip(again, self.history)) if got != seen), None)
                if first is not None:
                    raise _Broken(f"the replay's call {first} gave another result than the first time")
        except (StepLimitError, _Broken) as e:
            await self._kill()
            raise InfraError(f"bfcl: the API runner did not come up ({e})") from None

    async def _send_calls(self, calls: list[dict], timeout: float) -> list[dict]:
        try:
            return await self._request({"calls": calls}, timeout, len(calls))
        except (StepLimitError, _Broken):
            await self._kill()
            raise

    async def _request(self, message: dict, timeout: float, n: int) -> list[dict]:
        reply = await self._exchange(message, timeout)
        results = reply.get("results")
        if not isinstance(results, list) or len(results) != n or not all(isinstance(r, dict) for r in results):
            raise _Broken(f"it answered {json.dumps(reply)[:200]} to {n} call(s)")
        return results

    async def _exchange(self, message: dict | None, timeout: float) -> dict:
        """Send `message` (None: only read) and read the reply line; StepLimitError or _Broken."""
        assert self._reader is not None and self._writer is not None
        if message is not None:
            self._writer.write(json.dumps(message).encode() + b"\n")
        try:
            async with asyncio.timeout(timeout):
                line = await self._reader.readline()
        except TimeoutError:
            raise StepLimitError(f"the calls did not finish within {timeout:g}s") from None
        except ValueError:  # the line passed the reader's limit
            raise StepLimitError(f"the calls' results passed the reply limit ({READ_LIMIT_BYTES} bytes)") from None
        except asyncio.CancelledError:
            self._stale = True
            raise
        if not line:
            raise _Broken("it exited")
        try:
            reply = json.loads(line)
        except json.JSONDecodeError:
            reply = None
        if not isinstance(reply, dict):
            raise _Broken(f"it printed {await self._last_line(line)!r}")
        if reply.get("limit") == "memory":
            raise StepLimitError("the calls hit the memory limit")
        if "fatal" in reply:
            raise _Broken(f"it failed: {str(reply['fatal'])[:200]}")
        return reply

    async def _last_line(self, line: bytes) -> str:
        """The last line of what it prints within a moment after `line` (a traceback's last line)."""
        text = line
        try:
            async with asyncio.timeout(0.5):
                while len(text) < 1 << 16 and (more := await self._reader.read(1 << 16)):
                    text += more
        except TimeoutError:
            pass
        lines = text.decode(errors="replace").strip().splitlines() or [""]
        return lines[-1][:200]

    async def _kill(self) -> None:
        proc, self._proc, self._stale = self._proc, None, False
        for t in self._transports:
            try:
                t.close()
            except RuntimeError:  # its event loop is closed (a reset from another asyncio.run): close the pipe
                t.get_extra_info("pipe").close()
        self._transports, self._reader, self._writer = [], None, None
        if proc is not None:
            await stop_sandbox(proc)

