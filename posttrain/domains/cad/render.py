"""OpenSCAD in the bubblewrap sandbox: one fresh work dir per render, refused file references first.

    why = refusal(code)                      # None, or why the script may not be rendered
    out = render(code, timeout=8.0)          # RenderOutcome: stl bytes, or an error kind and message

`refusal` reads the script as OpenSCAD's lexer does (strings, // and /* */ comments skipped) and
refuses an `include <...>` / `use <...>` whose path is absolute or has a `..` part, and a call
that reads a file (import, surface, the deprecated import_stl / import_off / import_dxf /
dxf_* calls, any call's `file=`, an extruder's string argument) whose file is not a plain
relative string literal inside the work dir (no absolute path, no `..`, no backslash escape, no
computed name). What a static check cannot see (`linear_extrude(p)` with p a string variable)
is left to the sandbox, which shows nothing of the host anyway: only /usr read-only (openscad,
its libraries and fonts), a generated /etc and the render's own work dir, where part.scad is
the only file.

`render` writes part.scad into a fresh directory under this process's work root, runs
`openscad -o part.stl part.scad` there (posttrain.sandbox.process.run_command: no network, the
wall clock enforced by killing the sandbox's pid namespace, CPU / memory / file-size / process
rlimits, stdout + stderr capped), reads part.stl without following links (capped at STL_LIMIT)
and removes the directory. Errors are the model's (kind "tool_failed" or "tool_timeout"), except a
sandbox that cannot start (InfraError).
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import stat
import tempfile
import threading
import time
from dataclasses import dataclass

from posttrain.envs.env import InfraError
from posttrain.domains.terminal.session import new_work_dir, shared_isolation
from posttrain.sandbox.isolation import BwrapIsolation, Limits, resolve, sandbox_env
from posttrain.sandbox.process import Command, run_command
from posttrain.sandbox.types import SandboxError
from posttrain.sandbox.workdir import remove_work_dir

STL_LIMIT = 16 << 20  # bytes of part.stl (RLIMIT_FSIZE in the sandbox, and what is read back)
LOG_LIMIT = 64 << 10  # bytes of OpenSCAD's stdout and of its stderr
MEMORY = 1536 << 20  # RLIMIT_AS of openscad
MAX_LINES = 6  # error / warning lines quoted back

_TOKEN = re.compile(r'//[^\n]*|/\*.*?(?:\*/|$)|"(?:[^"\\]|\\.)*"?|[A-Za-z_$][A-Za-z0-9_$]*|\S', re.S)
_INCLUDE = re.compile(r"<([^>\n]*)>?")
# OpenSCAD 2021.01's calls that read a file: its first positional argument or `file=` (any call's `file=`
# is checked too); the extruders read one when given a string
READERS = ("import", "import_stl", "import_off", "import_dxf", "surface", "dxf_linear_extrude",
           "dxf_rotate_extrude", "dxf_dim", "dxf_cross")
EXTRUDERS = ("linear_extrude", "rotate_extrude")
_root_lock = threading.Lock()
_root: str | None = None


@dataclass(frozen=True)
class RenderOutcome:
    stl: bytes | None  # the mesh when it rendered
    error: str  # "" | "tool_failed" | "tool_timeout"
    message: str  # one line (plus quoted OpenSCAD lines) when it failed
    warnings: tuple[str, ...]  # OpenSCAD's WARNING / ECHO lines (at most MAX_LINES)
    seconds: float


def _outside(path: str) -> bool:
    return path.startswith("/") or ".." in re.split(r"[/\\]", path) or bool(re.match(r"[A-Za-z]:", path))


def _call_args(tokens: list[str], i: int) -> list[list[str]]:
    """The top-level arguments (each a token list) of the call whose "(" is tokens[i]."""
    depth, arg, args = 0, [], []
    for tok in tokens[i + 1:]:
        if tok in ("(", "[", "{"):
            depth += 1
        elif tok in (")", "]", "}"):
            if depth == 0:
                break
            depth -= 1
        if depth == 0 and tok == ",":
            args.append(arg)
            arg = []
        else:
            arg.append(tok)
    return args + [arg]


def _literal(value: list[str]) -> str | None:
    """The text of a lone string literal token, else None."""
    if len(value) == 1 and len(value[0]) >= 2 and value[0][0] == value[0][-1] == '"':
        return value[0][1:-1]
    return None


def _file_refusal(name: str, args: list[list[str]]) -> str | None:
    named = {a[0]: a[2:] for a in args if len(a) >= 2 and a[1] == "="}
    positional = [a for a in args if a and not (len(a) >= 2 and a[1] == "=")]
    if name in READERS:
        value = named.get("file", positional[0] if positional else [])
    elif "file" in named:
        value = named["file"]
    elif name in EXTRUDERS and positional and _literal(positional[0]) is not None:
        value = positional[0]  # linear_extrude("x.dxf", ...) reads a file too
    else:
        return None
    path = _literal(value)
    if path is None:
        return f"{name}(): the file must be a plain string literal naming a file in the work dir"
    if "\\" in path or _outside(path):
        return f'{name}("{path}") refers to a path outside the work dir'
    return None


def refusal(code: str) -> str | None:
    """Why `code` may not be rendered (a file reference outside the work dir), or None."""
    tokens, pos = [], 0
    while pos < len(code):
        m = _TOKEN.search(code, pos)
        if m is None:
            break
        tok, pos = m.group(0), m.end()
        if tok.startswith(("//", "/*")):
            continue
        if tok in ("include", "use"):
            start = pos
            while start < len(code) and code[start].isspace():
                start += 1
            inc = _INCLUDE.match(code, start)
            if inc is not None:
                pos = inc.end()
                if _outside(inc.group(1).strip()):
                    return f"{tok} <{inc.group(1).strip()}> refers to a path outside the work dir"
                continue
        tokens.append(tok)
    for i, tok in enumerate(tokens[:-1]):
        if tokens[i + 1] == "(" and (tok[0].isalpha() or tok[0] in "_$"):
            why = _file_refusal(tok, _call_args(tokens, i + 1))
            if why is not None:
                return why
    return None


def work_root() -> str:
    """This process's host directory for render dirs (removed at exit)."""
    global _root
    with _root_lock:
        if _root is None:
            _root = tempfile.mkdtemp(prefix="posttrain-cad-")
            os.chmod(_root, 0o711)  # the sandbox uid may traverse it, not list it
            atexit.register(shutil.rmtree, _root, True)
        return _root


def openscad_binary() -> str:
    found = resolve("openscad", ("/usr/bin/openscad",))
    if found is None or not found.startswith("/usr/"):
        raise InfraError("cad: openscad not found under /usr (Debian: `apt-get install openscad`)")
    return found


def _lines(text: str, prefixes: tuple[str, ...]) -> list[str]:
    return [ln.strip()[:300] for ln in text.splitlines() if ln.strip().startswith(prefixes)]


def _read_stl(path: str) -> bytes | None:
    """part.stl's bytes, never following a link and never past STL_LIMIT; None if absent or not a file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > STL_LIMIT:
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read(STL_LIMIT + 1)
    finally:
        os.close(fd)


def render(code: str, timeout: float, isolation: BwrapIsolation | None = None) -> RenderOutcome:
    """Render `code` (already checked by `refusal`) in a fresh sandbox; see the module docstring."""
    start = time.monotonic()
    try:
        iso = isolation or shared_isolation()
        work = new_work_dir(work_root(), {"part.scad": (code.encode(), 0o644)}, iso)
    except (OSError, SandboxError) as e:
        raise InfraError(f"cad sandbox: {e}") from e
    try:
        limits = Limits(memory_bytes=MEMORY, cpu_seconds=int(timeout) + 2, nproc=32, fsize_bytes=STL_LIMIT)
        argv, cwd = iso.command([openscad_binary(), "-o", "part.stl", "part.scad"], work, limits)
        try:
            out = run_command(Command(argv, cwd, sandbox_env(work, True), b"", timeout, LOG_LIMIT, work,
                                      STL_LIMIT + (1 << 20), 64, True))
        except SandboxError as e:
            raise InfraError(f"cad sandbox: {e}") from e
        log = (out.stdout + b"\n" + out.stderr).decode("utf-8", errors="replace")
        stl = _read_stl(os.path.join(work, "part.stl")) if out.exit_code == 0 and out.killed_for is None else None
    finally:
        remove_work_dir(work)
    seconds = time.monotonic() - start
    notes = tuple(_lines(log, ("WARNING:", "ECHO:", "DEPRECATED:"))[:MAX_LINES])

    def failed(kind: str, message: str) -> RenderOutcome:
        return RenderOutcome(None, kind, message, notes, seconds)

    errors = _lines(log, ("ERROR:",))[:MAX_LINES]
    if out.killed_for == "time_limit" or (out.exit_code in (-signal.SIGXCPU, 128 + signal.SIGXCPU)):
        return failed("tool_timeout", f"the render did not finish within {timeout:g}s and was stopped")
    if out.killed_for == "output_limit":
        return failed("tool_failed", f"OpenSCAD's output passed {LOG_LIMIT >> 10} KiB (too many echo() lines?)")
    if out.killed_for == "disk_limit" or out.exit_code in (-signal.SIGXFSZ, 128 + signal.SIGXFSZ):
        return failed("tool_failed", f"the STL passed its size limit ({STL_LIMIT >> 20} MiB): use fewer facets")
    if errors:
        return failed("tool_failed", "OpenSCAD reported: " + "; ".join(errors))
    if "bad_alloc" in log or out.exit_code in (-signal.SIGKILL, -signal.SIGSEGV, -signal.SIGABRT, 134, 137, 139):
        return failed("tool_failed", f"OpenSCAD ran out of memory or crashed (exit {out.exit_code}): "
                      "the geometry is too large (huge $fn or loop?)")
    if "top level object is empty" in log:
        return failed("tool_failed", "the script produced no geometry (the top level object is empty)")
    if "not a 3D object" in log:
        return failed("tool_failed", "the script produced a 2D object; the part must be 3D")
    if out.exit_code != 0 or stl is None:
        last = [ln for ln in log.splitlines() if ln.strip()][-1:] or ["no output"]
        return failed("tool_failed", f"OpenSCAD exited with code {out.exit_code} and no STL ({last[0][:200]})")
    return RenderOutcome(stl, "", "", notes, seconds)
