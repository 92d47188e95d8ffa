"""Requests, results and the `Sandbox` protocol shared by the local executor, the HTTP
server and the remote client.

A request names one program in one language; the sandbox compiles it (C, C++) and
runs it with stdin, input files and limits, and returns what happened plus the files
it was asked to fetch back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Literal, Mapping, Protocol

Language = Literal["python", "bash", "c", "cpp"]
LANGUAGES: tuple[str, ...] = ("python", "bash", "c", "cpp")


class Status(str, Enum):
    """How one command (compile or run) ended."""

    FINISHED = "Finished"  # exited by itself (any return code)
    ERROR = "Error"  # killed by a signal or could not start
    TIME_LIMIT = "TimeLimitExceeded"
    MEMORY_LIMIT = "MemoryLimitExceeded"
    OUTPUT_LIMIT = "OutputLimitExceeded"


@dataclass(frozen=True)
class RunRequest:
    code: str
    language: Language = "python"
    stdin: str = ""
    files: Mapping[str, bytes] = field(default_factory=dict)  # relative path -> content
    fetch_files: tuple[str, ...] = ()  # relative paths to bring back after the run
    compile_timeout: float = 10.0  # seconds, wall clock
    run_timeout: float = 10.0  # seconds, wall clock
    memory_limit_mb: int = 512
    output_limit_bytes: int = 1 << 20  # per stream


@dataclass(frozen=True)
class CommandResult:
    status: Status
    return_code: int | None
    stdout: str
    stderr: str
    wall_time: float  # seconds
    cpu_time: float  # seconds, user + system of the whole process tree


@dataclass(frozen=True)
class RunResult:
    compile: CommandResult | None  # None for interpreted languages
    run: CommandResult | None  # None when compilation failed
    files: Mapping[str, bytes] = field(default_factory=dict)  # fetched files that existed
    events: tuple[str, ...] = ()  # violations and notes, e.g. "time_limit", "output_limit"

    @property
    def ok(self) -> bool:
        """Compiled (if needed), ran, exited 0 within every limit."""
        if self.compile is not None and not (
            self.compile.status is Status.FINISHED and self.compile.return_code == 0
        ):
            return False
        return (
            self.run is not None
            and self.run.status is Status.FINISHED
            and self.run.return_code == 0
        )


class SandboxError(RuntimeError):
    """An infrastructure fault (the sandbox itself failed), never a fault of the user code."""


class Sandbox(Protocol):
    def run(self, request: RunRequest) -> RunResult: ...
