"""Helpers the terminal sandbox tests share: async tests, and the host processes a sandbox left behind."""

from __future__ import annotations

import asyncio
import functools
import os

UID = 64125 if os.geteuid() == 0 else os.getuid()  # a uid no other test's sandbox uses


def aio(fn):
    """Run an async test in a fresh event loop (fixtures pass through)."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        return asyncio.run(fn(*args, **kwargs))

    return run


def process_table() -> list[tuple[int, int, str]]:
    """(pid, real uid, command line) of every host process."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as f:
                real_uid = next(int(line.split()[1]) for line in f if line.startswith("Uid:"))
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, StopIteration):
            continue
        found.append((int(name), real_uid, cmd))
    return found


def processes_of(uid: int) -> list[str]:
    """The command lines of every host process whose real uid is `uid`."""
    return [cmd for _, real_uid, cmd in process_table() if real_uid == uid]


def cmdlines_with(marker: str) -> list[str]:
    """The pids of every host process whose command line holds `marker`."""
    found = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                if marker.encode() in f.read().replace(b"\0", b" "):
                    found.append(name)
        except OSError:
            continue
    return found


def terminal_task(folder, files: dict[str, str]):
    """Write a terminal task folder (`files`: relative path -> text) and load it as the one Task of
    the `terminal` source."""
    from posttrain.tasks.registry import make_source_tasks

    for rel, text in files.items():
        full = folder / rel
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_text(text)
    (task,) = make_source_tasks("terminal", n=None, seed=0, options={"dir": str(folder)})
    return task
