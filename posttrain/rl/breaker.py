"""Circuit breakers: a domain whose environment keeps failing is paused, then tried again.

    br = Breakers(failures=5, cooldown_steps=5)
    br.record("sql", ok=False, why="InfraError: sandbox unreachable")   # per finished episode
    br.allowed("sql", step)         # False while open; True again (half-open, one trial group) after cooldown
    br.end_step(step)               # -> lines to report: trips and recoveries this step

Only episodes whose environment or infrastructure failed count as failures ("infra_error",
"env_error": envs/metrics.py FAILED); a model that answers wrongly is no failure. A domain trips
after `failures` failed episodes in a row; it is skipped by the draws for `cooldown_steps` steps,
then half-open: it gets groups again, and its first failed episode re-opens it at once while a
success closes it. Open domains are logged as `breaker/open/DOMAIN`; the state is in checkpoints.
"""

from __future__ import annotations

from typing import Any


class Breakers:
    def __init__(self, failures: int = 5, cooldown_steps: int = 5):
        self.failures, self.cooldown = failures, cooldown_steps
        self.streak: dict[str, int] = {}  # failed episodes in a row
        self.open_until: dict[str, int] = {}  # domain -> first step it may run again
        self.half_open: set[str] = set()
        self.trips: dict[str, int] = {}  # times tripped over the run
        self.last_error: dict[str, str] = {}
        self._events: list[str] = []
        self._step = 0

    def record(self, domain: str, ok: bool, why: str = "") -> None:
        if ok:
            self.streak[domain] = 0
            if domain in self.half_open:
                self.half_open.discard(domain)
                self._events.append(f"domain {domain!r}: its environment works again; resumed")
            return
        self.streak[domain] = self.streak.get(domain, 0) + 1
        if why:
            self.last_error[domain] = why
        if domain in self.open_until:
            return
        if domain in self.half_open or self.streak[domain] >= self.failures:
            self.half_open.discard(domain)
            self.open_until[domain] = self._step + 1 + self.cooldown
            self.trips[domain] = self.trips.get(domain, 0) + 1
            self._events.append(
                f"domain {domain!r} paused for {self.cooldown} steps: its environment failed "
                f"{self.streak[domain]} episodes in a row (last: {self.last_error.get(domain, 'unknown')})")

    def allowed(self, domain: str, step: int) -> bool:
        until = self.open_until.get(domain)
        if until is None:
            return True
        if step >= until:  # cooldown over: half-open
            del self.open_until[domain]
            self.half_open.add(domain)
            self.streak[domain] = 0
            return True
        return False

    def begin_step(self, step: int) -> None:
        self._step = step

    def end_step(self) -> list[str]:
        events, self._events = self._events, []
        return events

    def is_open(self, domain: str) -> bool:
        return domain in self.open_until

    def state_dict(self) -> dict[str, Any]:
        return {"streak": dict(self.streak), "open_until": dict(self.open_until), "half_open": sorted(self.half_open),
                "trips": dict(self.trips), "last_error": dict(self.last_error)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.streak = {k: int(v) for k, v in state["streak"].items()}
        self.open_until = {k: int(v) for k, v in state["open_until"].items()}
        self.half_open = set(state["half_open"])
        self.trips = {k: int(v) for k, v in state["trips"].items()}
        self.last_error = dict(state["last_error"])
