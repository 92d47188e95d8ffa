"""The cost of verifying one terminal episode: `verify()` on each shipped task's oracle state.

    PYTHONPATH=. .venv/bin/python benchmarks/terminal_verify.py [--repeats 3] [--tasks a,b]

For each shipped task (posttrain/domains/terminal/data/) one episode plays the oracle (solve.sh)
through TerminalEnv, `env.state()` is taken once, and `verify()` over that state is timed
`--repeats` times (the episode itself is not timed: only what scoring costs). Prints each task's
median and, last, the median over the tasks. Needs bubblewrap; runs as root or not.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path

from posttrain.domains.terminal.env import TerminalEnv, work_root
from posttrain.domains.terminal.session import shared_isolation
from posttrain.domains.terminal.source import terminal_task
from posttrain.domains.terminal.task import load_task
from posttrain.domains.terminal.verify import verify

DATA = Path(__file__).resolve().parents[1] / "posttrain" / "domains" / "terminal" / "data"


async def oracle_state(task):
    env = TerminalEnv(with_solution=True)
    try:
        await env.reset(task)
        await env.run_oracle()
        return env.state()
    finally:
        await env.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tasks", default="", help="comma-separated folder names (default: all)")
    args = ap.parse_args()
    names = [n for n in args.tasks.split(",") if n] or sorted(p.name for p in DATA.iterdir() if p.is_dir())
    iso = shared_isolation()
    medians = []
    for name in names:
        tt = load_task(DATA / name)
        state = asyncio.run(oracle_state(terminal_task(tt)))
        times, value = [], None
        for _ in range(args.repeats):
            start = time.monotonic()
            value = verify(tt, state, isolation=iso, work_root=work_root()).value
            times.append(time.monotonic() - start)
        medians.append(statistics.median(times))
        print(f"{name:<26} reward {value:.2f}  verify median {medians[-1]:.3f} s  (min {min(times):.3f})")
    print(f"result: verification seconds per terminal episode, median over {len(names)} tasks = "
          f"{statistics.median(medians):.3f}")


if __name__ == "__main__":
    main()
