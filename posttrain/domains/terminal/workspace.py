"""An episode's final files, as JSON and back, checked so that verification can trust them.

    state = snapshot(work_dir, task_dir)     # after every process of the episode is dead
    refused = state["refused"]                # None, or why this workspace cannot be verified
    events = restore(state, dest)             # Refused(event, why) when it cannot be restored

`snapshot` walks the work dir without following links (lstat; links are kept as their target
text; FIFOs, sockets and devices are skipped) and stops at the first limit, recording why: more
than MAX_STATE_BYTES of file data (`state_over_cap`), more than MAX_ENTRIES entries
(`too_many_files`), a path longer than MAX_PATH_CHARS or deeper than MAX_DEPTH
(`path_too_long`), a directory it cannot read (`unreadable`). `restore` writes the files into an
empty directory that becomes /work of the verification sandbox, links last, and refuses a link
whose target, resolved the way the sandbox's kernel would (through the workspace's own links,
`..` included), leaves /work for anything but the read-only system trees (SYSTEM_TARGETS): such
a link could make "the agent's output" the verifier's own expected file (`link_out`). A refused
workspace scores 0 with its reason; it is never an infrastructure error.
"""

from __future__ import annotations

import base64
import os
import stat
from typing import Any

from posttrain.sandbox.workdir import check_relative_path

MAX_STATE_BYTES = 16 << 20
MAX_ENTRIES = 20000
MAX_PATH_CHARS = 1024
MAX_DEPTH = 64
MAX_LINK_HOPS = 40
REWARD_NAMES = ("reward.txt", "reward.json")
SYSTEM_TARGETS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
SYSTEM_FILES = ("/dev/null",)


class Refused(Exception):
    """This workspace cannot be verified: reward 0, `event` in the score's events."""

    def __init__(self, event: str, why: str) -> None:
        super().__init__(why)
        self.event = event


def _empty(task_dir: str, total: int, event: str, why: str) -> dict[str, Any]:
    return {"task_dir": task_dir, "files": {}, "dirs": {}, "links": {}, "skipped": [], "bytes": total,
            "over_cap": event == "state_over_cap", "refused": {"event": event, "why": why}}


def snapshot(work_dir: str, task_dir: str, max_bytes: int = MAX_STATE_BYTES) -> dict[str, Any]:
    """The work dir as JSON (module docstring): files (base64 + mode), dirs (mode), links (target)."""
    files: dict[str, dict] = {}
    dirs: dict[str, int] = {}
    links: dict[str, str] = {}
    skipped: list[str] = []
    errors: list[str] = []
    total = entries = 0
    for dirpath, dirnames, filenames in os.walk(work_dir, onerror=lambda e: errors.append(str(e.filename))):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, work_dir)
            entries += 1
            if entries > MAX_ENTRIES:
                return _empty(task_dir, total, "too_many_files", f"more than {MAX_ENTRIES} files and directories")
            if len(rel) > MAX_PATH_CHARS or rel.count("/") >= MAX_DEPTH:
                return _empty(task_dir, total, "path_too_long", f"a path longer than {MAX_PATH_CHARS} characters "
                              f"or {MAX_DEPTH} levels deep ({rel[:80]}...)")
            try:
                st = os.lstat(full)
                if stat.S_ISLNK(st.st_mode):
                    links[rel] = os.readlink(full)
                elif stat.S_ISDIR(st.st_mode):
                    dirs[rel] = stat.S_IMODE(st.st_mode)
                elif stat.S_ISREG(st.st_mode):
                    total += st.st_size
                    if total > max_bytes:
                        return _empty(task_dir, total, "state_over_cap",
                                      f"the final files exceed {max_bytes >> 20} MiB")
                    fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
                    with os.fdopen(fd, "rb") as f:
                        data = f.read(max_bytes + 1)
                    files[rel] = {"data": base64.b64encode(data).decode(), "mode": stat.S_IMODE(st.st_mode)}
                else:
                    skipped.append(rel)
            except OSError:
                skipped.append(rel)
    if errors:
        return _empty(task_dir, total, "unreadable", f"a directory could not be read ({os.path.relpath(errors[0], work_dir)})")
    return {"task_dir": task_dir, "files": files, "dirs": dirs, "links": links, "skipped": sorted(skipped),
            "bytes": total, "over_cap": False, "refused": None}


def planted(rel: str) -> bool:
    return os.path.basename(rel) in REWARD_NAMES or rel.startswith("logs/verifier")


def _system(path: str) -> bool:
    """An absolute link target (already joined with what follows it) inside a read-only system tree,
    with no `..` that could climb out of it."""
    parts = path.split("/")
    if ".." in parts:
        return False
    norm = "/" + "/".join(p for p in parts if p not in ("", "."))
    return norm in SYSTEM_FILES or any(norm == t or norm.startswith(t + "/") for t in SYSTEM_TARGETS)


def escapes(dest: str, rel: str) -> bool:
    """Whether /work/`rel`, resolved as the sandbox's kernel would (links followed, `..` applied),
    leaves /work for anything but SYSTEM_TARGETS; `dest` is the host dir that becomes /work."""
    todo = [p for p in rel.split("/")][::-1]  # a stack: the next component last
    cur: list[str] = []
    hops = 0
    while todo:
        part = todo.pop()
        if part in ("", "."):
            continue
        if part == "..":
            if not cur:
                return True  # above /work: the sandbox's root
            cur.pop()
            continue
        host = os.path.join(dest, *cur, part)
        if not os.path.islink(host):
            cur.append(part)
            continue
        hops += 1
        if hops > MAX_LINK_HOPS:
            return True
        target = os.readlink(host)
        if target.startswith("/"):
            inside = target.rstrip("/") == "/work" or target.startswith("/work/")
            if not inside:
                return not _system("/".join([target, *todo[::-1]]))
            cur, target = [], target[len("/work"):]
        todo.extend(target.split("/")[::-1])
    return False


def restore(state: dict, dest: str) -> list[str]:
    """Write a snapshot into the empty dir `dest` (planted reward files left out); events.
    Refused when the state says so or when a link leaves the workspace (module docstring)."""
    refused = state.get("refused")
    if refused:
        raise Refused(refused["event"], refused["why"])
    if state.get("over_cap"):
        raise Refused("state_over_cap", f"the final files exceed {MAX_STATE_BYTES >> 20} MiB")
    events: set[str] = set()
    entries = [(check_relative_path("state", p), v) for p, v in state.get("files", {}).items()]
    dirs = [(check_relative_path("state", p), m) for p, m in state.get("dirs", {}).items()]
    links = [(check_relative_path("state", p), t) for p, t in state.get("links", {}).items()]

    def keep(rel: str) -> bool:
        if planted(rel):
            events.add("planted_reward_file")
            return False
        return True

    for rel, _mode in sorted(dirs):
        if keep(rel):
            os.makedirs(os.path.join(dest, rel), exist_ok=True)
    for rel, entry in entries:
        if keep(rel):
            full = os.path.join(dest, rel)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(base64.b64decode(entry["data"]))
            os.chmod(full, int(entry["mode"]) & 0o777)
    real = os.path.realpath(dest)
    for rel, target in sorted(links):  # last: nothing is ever written through them
        full = os.path.join(dest, rel)
        parent = os.path.dirname(full)
        # the parent must be a real directory of dest (no link on the way: never create outside it)
        if keep(rel) and not os.path.lexists(full) and os.path.realpath(parent) == os.path.join(real, os.path.dirname(rel)).rstrip("/"):
            os.symlink(str(target), full)
    for rel, _target in sorted(links):
        if os.path.islink(os.path.join(dest, rel)) and escapes(dest, rel):
            raise Refused("link_out", f"the link {rel} -> {_target} leads out of the workspace")
    for rel, mode in sorted(dirs, reverse=True):  # modes last, deepest first (a 0o555 dir was written into)
        if keep(rel):
            os.chmod(os.path.join(dest, rel), (int(mode) & 0o777) | 0o700)
    return sorted(events)
