"""The RL scheduler's ledger: every drawn item accounted for, and the files of an exact resume.

    ledger = Ledger(out_dir)              # RUN_DIR/scheduler_items.jsonl
    serial = ledger.next_serial()         # a drawn item's number (its sampling seeds derive from it)
    ledger.requeue(item)                  # back to the queue's front (fresh items), counted
    ledger.settle(serial, "trained")      # or "dropped"
    ledger.log_step(step, carried, ready) # one row per step: serials trained, dropped, re-queued, ...
    ledger.save(dir, state, prefetched); state, prefetched = ledger.load(dir, step)

A checkpoint's scheduler/ holds state.json (next serial, pass rates, costs, breakers, curriculum
levels, ledger counts: what rl/plan.py's `Planner.state_dict` gives) and pending.pkl (the
re-queued tasks, checksummed), never half-run episodes; in asynchronous RL also prefetched.pkl,
the next step's batch (rolled out, verified, not yet trained).
"""

from __future__ import annotations

import json
from collections import Counter, deque
from pathlib import Path
from typing import Any

from posttrain.core.fsio import read_checked_pickle, write_checked_pickle, write_text_atomic
from posttrain.core.types import Task

ITEMS_LOG = "scheduler_items.jsonl"  # in the run dir: per step, the serials trained, dropped, re-queued, carried
STATE_FILE = "state.json"
PENDING_FILE = "pending.pkl"
PREFETCHED_FILE = "prefetched.pkl"  # asynchronous RL (scheduler.max_staleness >= 1): the next step's batch


def _no_serials() -> dict[str, list[int]]:
    return {"trained": [], "dropped": [], "requeued": []}


class Ledger:
    def __init__(self, out_dir) -> None:
        self.serial = 0  # items drawn so far (the next one's serial)
        self.pending: deque[tuple[int, Task]] = deque()  # re-queued (serial, task): drawn, never trained
        self.counts: Counter = Counter()  # items: trained, dropped, requeued (over the run)
        self.items_log = Path(out_dir) / ITEMS_LOG
        self.items_log.parent.mkdir(parents=True, exist_ok=True)
        self.logged_step = -1
        self._serials = _no_serials()

    def next_serial(self) -> int:
        self.serial += 1
        return self.serial - 1

    def take(self, n: int) -> list[tuple[int, Task]]:
        """Up to `n` re-queued (serial, task), oldest first."""
        out = []
        while self.pending and len(out) < n:
            out.append(self.pending.popleft())
        return out

    def requeue(self, item) -> bool:
        """A cancelled item: a fresh one goes back to the queue's front with its serial (True); a
        replay one is dropped (its stored successes stay in the buffer)."""
        self.counts["requeued"] += 1
        if item.stored:
            return False
        self.pending.appendleft((item.serial, item.task))
        self._serials["requeued"].append(item.serial)
        return True

    def settle(self, serial: int, outcome: str) -> None:
        """A finished item: "trained" or "dropped"."""
        self.counts[outcome] += 1
        self._serials[outcome].append(serial)

    def log_step(self, step: int, carried: list, ready: list, **extra) -> None:
        self.logged_step = step
        row = {"step": step + 1, **extra, **{k: sorted(v) for k, v in self._serials.items()},
               "carried": sorted(i.serial for i in carried), "ready": sorted(i.serial for i in ready),
               "pending": [serial for serial, _ in self.pending], "serial": self.serial}
        with open(self.items_log, "a") as f:
            f.write(json.dumps(row) + "\n")
        self._serials = _no_serials()

    def fresh_run(self) -> None:
        """A fresh run in a used out_dir: the old items log goes."""
        self.items_log.unlink(missing_ok=True)

    def save(self, directory: Path, state: dict[str, Any], prefetched=None) -> None:
        """state.json (the planner's numbers), pending.pkl, and prefetched.pkl when given."""
        directory.mkdir(parents=True, exist_ok=True)
        write_checked_pickle(directory / PENDING_FILE, {"pending": list(self.pending)})
        if prefetched is not None:  # asynchronous RL: the next step's groups, rolled out, not yet trained
            write_checked_pickle(directory / PREFETCHED_FILE, {"batch": prefetched})
        write_text_atomic(directory / STATE_FILE, json.dumps(state, indent=1) + "\n")

    def load(self, directory: Path, step: int) -> tuple[dict | None, Any]:
        """(the planner's saved state or None for a checkpoint from before the scheduler, the
        prefetched batch or None); the items log keeps only the rows up to `step`."""
        path = directory / PREFETCHED_FILE
        prefetched = read_checked_pickle(path, "prefetched batch")["batch"] if path.exists() else None
        if self.items_log.exists():  # rows a killed process wrote after its last checkpoint
            rows = [line for line in self.items_log.read_text().splitlines() if line.strip()]
            last = step + (prefetched is not None)  # a prefetched batch's row came before the checkpoint
            keep = [r for r in rows if json.loads(r)["step"] <= last]
            write_text_atomic(self.items_log, "".join(r + "\n" for r in keep))
        if not (directory / STATE_FILE).exists():
            return None, prefetched
        state = json.loads((directory / STATE_FILE).read_text())
        self.serial = int(state["serial"])
        self.counts = Counter(state["ledger"])
        pending = read_checked_pickle(directory / PENDING_FILE, "scheduler queue")["pending"]
        self.pending = deque((int(serial), task) for serial, task in pending)
        return state, prefetched
