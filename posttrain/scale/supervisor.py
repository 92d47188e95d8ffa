"""What the rollout and sandbox supervisors share: which Ray errors mean "the worker died", a
one-line cause, and the record of each death.

A worker is an actor started with `max_restarts=0`: Ray never restarts it behind our back, so a
dead one is replaced by the supervisor, which alone decides what the replacement loads and what is
re-queued. An error raised by the work itself (a bad request, an engine error) is not a death: it
reaches the caller unchanged and nothing is re-run.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import asdict, dataclass

log = logging.getLogger("posttrain.scale")


def death_errors() -> tuple[type[BaseException], ...]:
    """The Ray errors of a call whose worker process is gone (killed, crashed, its node lost)."""
    from ray.exceptions import NodeDiedError, RayActorError, WorkerCrashedError

    return (RayActorError, WorkerCrashedError, NodeDiedError)


def cause_of(exc: BaseException) -> str:
    """A short cause from Ray's multi-line death message, e.g. "worker process exited:
    UNEXPECTED_SYSTEM_EXIT, pid 1234"."""
    text = str(exc)
    kind = re.search(r"Worker exit type: (\w+)", text)
    pid = re.search(r"\bpid[=: ]+(\d+)", text)
    if kind:
        return f"worker process exited: {kind.group(1)}" + (f", pid {pid.group(1)}" if pid else "")
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(exc).__name__)
    return (first[:157] + "...") if len(first) > 160 else first


def not_started(role: str, index: int, timeout_s: float, resources: dict) -> Exception:
    """The one-line error for a worker that did not come up within `timeout_s`."""
    import ray

    from posttrain.core.errors import ConfigError

    asked = {k: v for k, v in resources.items() if k in ("num_cpus", "num_gpus") and v}
    have = {k: v for k, v in ray.available_resources().items() if k in ("CPU", "GPU")}
    return ConfigError(f"cluster: {role} worker {index} did not start within {timeout_s:g}s (each asks "
                       f"for {asked or 'no resources'}; the cluster has {have or 'none'} free)")


@dataclass
class Fault:
    """One dead worker: its role ("rollout" | "sandbox"), index, cause, what was re-queued."""

    role: str
    worker: int
    cause: str
    requeued: int  # requests re-submitted to the replacement (exactly once each)
    version: int | None = None  # rollout: the weights version the replacement loaded before serving
    at: float = 0.0  # time.time() of the replacement

    def line(self) -> str:
        at = f" at version {self.version}" if self.version is not None else ""
        noun = "request" if self.requeued == 1 else "requests"
        verb = "re-queued" if self.role == "rollout" else "re-ran"
        return f"{self.role} worker {self.worker} died ({self.cause}): restarted{at}, {verb} {self.requeued} {noun}"

    def as_dict(self) -> dict:
        return asdict(self)


def record(faults: list[Fault], fault: Fault) -> Fault:
    """Append `fault` (time-stamped) and log its one line as a warning."""
    fault.at = time.time()
    faults.append(fault)
    log.warning(fault.line())
    return fault
