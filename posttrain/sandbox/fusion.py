"""Conversion between SandboxFusion's `/run_code` JSON and our request/result types.

SandboxFusion (github.com/bytedance/SandboxFusion) is the de-facto HTTP API for code
sandboxes in LLM training: its PyPI client `sandbox-fusion` and verl's sandbox reward
speak it. We speak it too, so any of them can use our server, and our client can use
any SandboxFusion deployment.

Request (`POST /run_code`, JSON object; unknown fields are ignored):
    code: str (required)            language: one of LANGUAGES (required)
    stdin: str | null               compile_timeout, run_timeout: seconds, > 0 (default 10)
    memory_limit_MB: int (<= 0, SandboxFusion's default -1, means the server's default)
    files: {relative path: base64 | null}   (null entries are skipped, as SandboxFusion does)
    fetch_files: [relative path]
Paths must be relative and stay inside the work directory: absolute paths, `..`
components, empty names and NUL bytes are refused before anything runs.

Response:
    status: "Success" (compiled, ran, exited 0 within every limit) | "Failed" (the user
            code failed in any way) | "SandboxError" (infrastructure fault; retry)
    message: "" on success, a one-line summary otherwise
    compile_result, run_result: null or {status, execution_time, cpu_time, return_code,
            stdout, stderr, posttrain: {status, return_code}}
    executor_pod_name: $MY_POD_NAME or null (as SandboxFusion)
    files: {path: base64} for the fetched files that existed
    posttrain: {events: [...]}

SandboxFusion knows three command statuses: Finished, Error, TimeLimitExceeded; its
clients reject any other value, and treat Error as a sandbox fault. Our statuses map so:
    Finished            -> Finished, same return code
    TimeLimitExceeded   -> TimeLimitExceeded, same return code (usually null)
    Error, with a code  -> Finished, same code: SandboxFusion reports a process killed
                           by a signal as Finished with a non-zero code too
    Error, no code      -> Error (the program could not start)
    MemoryLimitExceeded -> Finished, return code as reported, or -9 when none was (the
    OutputLimitExceeded    process was killed with SIGKILL): SandboxFusion has no such
                           status and shows such a run as a non-zero exit
The exact status and return code travel in the extra `posttrain` object, which
SandboxFusion clients ignore and our client reads, so a round trip through our own
server loses nothing. From a real SandboxFusion, `cpu_time` may be absent: it reads 0.0.
"""

from __future__ import annotations

import base64
import binascii
import math
from pathlib import PurePosixPath
from typing import Any, Mapping

from posttrain.sandbox.types import LANGUAGES, CommandResult, RunRequest, RunResult, Status

KILLED_RETURN_CODE = -9  # SIGKILL, shown for a limit kill that reported no return code

_TO_FUSION = {
    Status.FINISHED: "Finished",
    Status.TIME_LIMIT: "TimeLimitExceeded",
    Status.ERROR: "Error",
    Status.MEMORY_LIMIT: "Finished",
    Status.OUTPUT_LIMIT: "Finished",
}
_FROM_FUSION = {"Finished": Status.FINISHED, "TimeLimitExceeded": Status.TIME_LIMIT, "Error": Status.ERROR}


class RequestError(ValueError):
    """A malformed request; `str()` is one line naming the field."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"{field}: {problem}")
        self.field = field


# ---------------------------------------------------------------- requests


def check_relative_path(path: object, field: str) -> str:
    """Return `path` if it names a file inside the work directory, else raise RequestError."""
    if not isinstance(path, str):
        raise RequestError(field, f"must be a string path, got {type(path).__name__}")
    if "\x00" in path:
        raise RequestError(field, "path contains a NUL byte")
    pure = PurePosixPath(path)
    if pure.is_absolute():
        raise RequestError(field, f"absolute path {path!r} is not allowed; paths are relative to the work directory")
    if ".." in pure.parts:
        raise RequestError(field, f"path {path!r} leaves the work directory ('..' is not allowed)")
    if not pure.parts:
        raise RequestError(field, f"path {path!r} does not name a file")
    return path


def _number(payload: Mapping[str, Any], field: str, default: float) -> float:
    value = payload.get(field)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RequestError(field, f"must be a number of seconds, got {type(value).__name__}")
    if not math.isfinite(value) or value <= 0:
        raise RequestError(field, f"must be a positive number of seconds, got {value}")
    return float(value)


def _memory(payload: Mapping[str, Any], default_mb: int) -> int:
    value = payload.get("memory_limit_MB")
    if value is None:
        return default_mb
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError("memory_limit_MB", f"must be an integer number of megabytes, got {value!r}")
    return default_mb if value <= 0 else value


def _files(payload: Mapping[str, Any]) -> dict[str, bytes]:
    raw = payload.get("files")
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise RequestError("files", f"must be an object mapping path to base64 content, got {type(raw).__name__}")
    files: dict[str, bytes] = {}
    for path, content in raw.items():
        field = f"files[{path!r}]"
        check_relative_path(path, field)
        if content is None:  # SandboxFusion skips these
            continue
        if not isinstance(content, str):
            raise RequestError(field, f"content must be a base64 string, got {type(content).__name__}")
        try:
            files[path] = base64.b64decode(content, validate=True)
        except (binascii.Error, ValueError) as e:
            raise RequestError(field, f"content is not valid base64 ({e})") from None
    return files


def _fetch_files(payload: Mapping[str, Any]) -> tuple[str, ...]:
    raw = payload.get("fetch_files")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise RequestError("fetch_files", f"must be a list of paths, got {type(raw).__name__}")
    paths = [check_relative_path(p, f"fetch_files[{i}]") for i, p in enumerate(raw)]
    return tuple(dict.fromkeys(paths))  # drop duplicates, keep order


def parse_request(payload: object, *, default_memory_limit_mb: int = 512) -> RunRequest:
    """Validate a decoded `/run_code` JSON body; raise RequestError naming the bad field."""
    if not isinstance(payload, dict):
        raise RequestError("request body", f"must be a JSON object, got {type(payload).__name__}")
    code = payload.get("code")
    if not isinstance(code, str):
        raise RequestError("code", "is required and must be a string" if code is None else "must be a string")
    language = payload.get("language")
    if language not in LANGUAGES:
        shown = "missing" if language is None else repr(language)
        raise RequestError("language", f"{shown} is not supported; use one of {', '.join(LANGUAGES)}")
    stdin = payload.get("stdin")
    if stdin is not None and not isinstance(stdin, str):
        raise RequestError("stdin", f"must be a string or null, got {type(stdin).__name__}")
    return RunRequest(
        code=code,
        language=language,
        stdin=stdin or "",
        files=_files(payload),
        fetch_files=_fetch_files(payload),
        compile_timeout=_number(payload, "compile_timeout", 10.0),
        run_timeout=_number(payload, "run_timeout", 10.0),
        memory_limit_mb=_memory(payload, default_memory_limit_mb),
    )


def request_to_json(request: RunRequest) -> dict[str, Any]:
    """The `/run_code` body for `request` (what our client sends)."""
    return {
        "code": request.code,
        "language": request.language,
        "stdin": request.stdin,
        "compile_timeout": request.compile_timeout,
        "run_timeout": request.run_timeout,
        "memory_limit_MB": request.memory_limit_mb,
        "files": {p: base64.b64encode(c).decode("ascii") for p, c in request.files.items()},
        "fetch_files": list(request.fetch_files),
    }


# ---------------------------------------------------------------- responses


def command_to_json(cmd: CommandResult | None) -> dict[str, Any] | None:
    if cmd is None:
        return None
    fusion_status = _TO_FUSION[cmd.status]
    return_code = cmd.return_code
    if cmd.status is Status.ERROR and return_code is not None:
        fusion_status = "Finished"
    if cmd.status in (Status.MEMORY_LIMIT, Status.OUTPUT_LIMIT) and return_code is None:
        return_code = KILLED_RETURN_CODE
    return {
        "status": fusion_status,
        "execution_time": cmd.wall_time,
        "cpu_time": cmd.cpu_time,
        "return_code": return_code,
        "stdout": cmd.stdout,
        "stderr": cmd.stderr,
        "posttrain": {"status": cmd.status.value, "return_code": cmd.return_code},
    }


def _summary(result: RunResult) -> str:
    """One line saying why a run did not succeed ("" when it did)."""
    if result.ok:
        return ""
    for name, cmd in (("compile", result.compile), ("run", result.run)):
        if cmd is None:
            continue
        if cmd.status is Status.FINISHED and cmd.return_code == 0:
            continue
        if cmd.status is Status.FINISHED:
            return f"{name}: exited with code {cmd.return_code}"
        code = "" if cmd.return_code is None else f" (return code {cmd.return_code})"
        return f"{name}: {cmd.status.value}{code}"
    return "no command ran"


def result_to_json(result: RunResult, *, pod_name: str | None = None) -> dict[str, Any]:
    """The SandboxFusion response for a run that happened (Success or Failed)."""
    return {
        "status": "Success" if result.ok else "Failed",
        "message": _summary(result),
        "compile_result": command_to_json(result.compile),
        "run_result": command_to_json(result.run),
        "executor_pod_name": pod_name,
        "files": {p: base64.b64encode(c).decode("ascii") for p, c in result.files.items()},
        "posttrain": {"events": list(result.events)},
    }


def sandbox_error_json(message: str, *, pod_name: str | None = None) -> dict[str, Any]:
    """The SandboxFusion response for an infrastructure fault."""
    return {
        "status": "SandboxError",
        "message": message,
        "compile_result": None,
        "run_result": None,
        "executor_pod_name": pod_name,
        "files": {},
    }


def _command_from_json(data: object, field: str) -> CommandResult | None:
    if data is None:
        return None
    if not isinstance(data, dict):
        raise ValueError(f"{field}: must be an object or null")
    extra = data.get("posttrain") if isinstance(data.get("posttrain"), dict) else None
    try:
        status = Status(extra["status"]) if extra else _FROM_FUSION[data.get("status")]
    except (KeyError, ValueError):
        raise ValueError(f"{field}.status: unknown status {data.get('status')!r}") from None
    return_code = extra.get("return_code") if extra else data.get("return_code")
    if return_code is not None and not isinstance(return_code, int):
        raise ValueError(f"{field}.return_code: must be an integer or null")
    return CommandResult(
        status=status,
        return_code=return_code,
        stdout=data.get("stdout") or "",
        stderr=data.get("stderr") or "",
        wall_time=float(data.get("execution_time") or 0.0),
        cpu_time=float(data.get("cpu_time") or 0.0),
    )


def result_from_json(data: object) -> tuple[str, str, RunResult | None]:
    """Parse a `/run_code` response into (status, message, result); result is None for
    SandboxError. Raises ValueError when the response is not SandboxFusion-shaped."""
    if not isinstance(data, dict):
        raise ValueError("response is not a JSON object")
    status, message = data.get("status"), str(data.get("message") or "")
    if status == "SandboxError":
        return status, message, None
    if status not in ("Success", "Failed"):
        raise ValueError(f"status: unknown run status {status!r}")
    raw_files = data.get("files") or {}
    if not isinstance(raw_files, dict):
        raise ValueError("files: must be an object")
    try:
        files = {p: base64.b64decode(c, validate=True) for p, c in raw_files.items()}
    except (binascii.Error, TypeError, ValueError) as e:
        raise ValueError(f"files: content is not valid base64 ({e})") from None
    extra = data.get("posttrain") if isinstance(data.get("posttrain"), dict) else {}
    result = RunResult(
        compile=_command_from_json(data.get("compile_result"), "compile_result"),
        run=_command_from_json(data.get("run_result"), "run_result"),
        files=files,
        events=tuple(str(e) for e in extra.get("events") or ()),
    )
    return status, message, result
