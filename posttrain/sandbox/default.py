"""The process's sandbox: what the `code` verifier and the environments run in unless told otherwise.

    sandbox = get_sandbox()          # a bwrap LocalSandbox, made on first use, closed at exit
    set_sandbox(RemoteSandbox(url))  # e.g. a sandbox server pool (recipes/rl.py, scale/)
"""

from __future__ import annotations

import atexit
import os
import threading

from posttrain.sandbox import LocalSandbox, Sandbox

_lock = threading.Lock()
_sandbox: Sandbox | None = None


def get_sandbox() -> Sandbox:
    """The process-wide sandbox (a bwrap LocalSandbox, made on first use)."""
    global _sandbox
    with _lock:
        if _sandbox is None:
            _sandbox = LocalSandbox(max_workers=os.cpu_count() or 1, max_queue=256)
            atexit.register(_sandbox.close)
        return _sandbox


def set_sandbox(sandbox: Sandbox | None) -> None:
    """Use another sandbox (e.g. a RemoteSandbox pool) for verifiers and environments; None: the default."""
    global _sandbox
    with _lock:
        _sandbox = sandbox
