"""The scheduler's ledger and checkpointed state (a mixin of scheduler/core.py's Scheduler).

    sched.drain()                     # before a checkpoint: in-flight and untrained work re-queued
    sched.save(dir); sched.load(dir, step)
    RUN_DIR/scheduler_items.jsonl     # per step: serials trained, dropped, re-queued, carried, pending

A checkpoint's scheduler/ holds state.json (next serial, pass rates, costs, breakers, curriculum
levels, ledger counts) and pending.pkl (the re-queued tasks, checksummed), never half-run episodes;
in asynchronous RL also prefetched.pkl, the next step's batch (rolled out, verified, not yet trained).
"""

from __future__ import annotations

import json
from collections import Counter, deque
from pathlib import Path
from typing import Any

from posttrain.core.fsio import read_checked_pickle, write_checked_pickle
from posttrain.core.errors import ConfigError
from posttrain.core.fsio import write_text_atomic

ITEMS_LOG = "scheduler_items.jsonl"  # in the run dir: per step, the serials trained, dropped, re-queued, carried
STATE_FILE = "state.json"
PENDING_FILE = "pending.pkl"
PREFETCHED_FILE = "prefetched.pkl"  # asynchronous RL (scheduler.max_staleness >= 1): the next step's batch


class Persistence:
    def _log_items(self, step: int, **extra) -> None:
        self._logged_step = step
        row = {"step": step + 1, **extra, **{k: sorted(v) for k, v in self._step_serials.items()},
               "carried": sorted(i.serial for i in self.carried), "ready": sorted(i.serial for i in self.ready),
               "pending": [serial for serial, _ in self.pending], "serial": self.serial}
        with open(self.items_log, "a") as f:
            f.write(json.dumps(row) + "\n")
        self._step_serials = {"trained": [], "dropped": [], "requeued": []}


    def drain(self) -> None:
        """Before a checkpoint: re-queue what is in flight or finished but untrained, so the saved
        state is whole (pending items only)."""
        if self.carried or self.ready:
            if self._suspended:
                self.client.resume()
                self._suspended = False
            self.loop.run_until_complete(self._cancel(self.carried + self.ready, "checkpoint"))
            self.carried, self.ready = [], []
            self._log_items(self._logged_step, drained=True)

    def state_dict(self) -> dict[str, Any]:
        return {"serial": self.serial, "rates": self.rates.state_dict(), "costs": self.costs.state_dict(),
                "breakers": self.breakers.state_dict(), "ledger": dict(self.ledger),
                "curricula": {d: c.state_dict() for d, c in self.curricula.items()}}

    def save(self, directory: Path) -> None:
        """The checkpoint's scheduler/: state.json (numbers) and pending.pkl (the re-queued tasks)."""
        self.drain()
        directory.mkdir(parents=True, exist_ok=True)
        write_checked_pickle(directory / PENDING_FILE, {"pending": list(self.pending)})
        if self.prefetched is not None:  # asynchronous RL: the next step's groups, rolled out, not yet trained
            write_checked_pickle(directory / PREFETCHED_FILE, {"batch": self.prefetched})
        write_text_atomic(directory / STATE_FILE, json.dumps(self.state_dict(), indent=1) + "\n")

    def load(self, directory: Path, step: int) -> None:
        """Restore the state saved at `step`; the items log keeps only the rows up to it."""
        prefetched = directory / PREFETCHED_FILE
        if prefetched.exists():
            self.prefetched = read_checked_pickle(prefetched, "prefetched batch")["batch"]
        if self.items_log.exists():  # rows a killed process wrote after its last checkpoint
            rows = [line for line in self.items_log.read_text().splitlines() if line.strip()]
            last = step + (self.prefetched is not None)  # a prefetched batch's row came before the checkpoint
            keep = [r for r in rows if json.loads(r)["step"] <= last]
            write_text_atomic(self.items_log, "".join(r + "\n" for r in keep))

        if not (directory / STATE_FILE).exists():  # a checkpoint from before the scheduler: fresh state
            return
        state = json.loads((directory / STATE_FILE).read_text())
        self.serial = int(state["serial"])
        self.rates.load_state_dict(state["rates"])
        self.costs.load_state_dict(state["costs"])
        self.breakers.load_state_dict(state["breakers"])
        self.ledger = Counter(state["ledger"])
        for d, c in state["curricula"].items():
            if d not in self.curricula:
                raise ConfigError(f"the checkpoint has a curriculum for domain {d!r}, the config does not")
            self.curricula[d].load_state_dict(c)
            self.sources[d].set_options(self.curricula[d].options())
        pending = read_checked_pickle(directory / PENDING_FILE, "scheduler queue")["pending"]
        self.pending = deque((int(serial), task) for serial, task in pending)
