"""Sandbox throughput and latency: isolated runs of a short Python program vs plain subprocesses.

    python benchmarks/sandbox.py [--runs 200] [--latency-runs 60] [--workers N]

Latency: one run at a time, end to end (request in, result out). Throughput: `--runs`
requests pushed through the sandbox's bounded pool by 2 x workers client threads. The floor
is the same program, started the same way (absolute interpreter, -E -s -B, a file in a
fresh directory), as a plain unisolated subprocess: what a user without a sandbox runs (no
sandbox service can be reached from this machine), and the peer of the headline. Every result
is checked. The last line is `result: runs/s isolated/plain subprocess = X (target >= 0.4)`:
isolation may cost at most 2.5x the throughput of running untrusted code unprotected. The
absolute rate (target >= 50 runs/s on 2 cores) and the p50 overhead (<= 20 ms) come before it.

The table also shows the CPU each run costs (all processes of the run, plus this process's
share) and the rate that cost allows on idle cores, since a shared machine's other load
lowers the measured rate.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from posttrain.sandbox import LocalSandbox, RunRequest  # noqa: E402
from posttrain.sandbox.executor import Toolchain  # noqa: E402
from posttrain.sandbox.pool import percentile  # noqa: E402

CODE = "print(sum(range(1000)))"
EXPECTED = "499500\n"


def plain_run(python: str) -> float:
    start = time.monotonic()
    work = tempfile.mkdtemp(prefix="bench-plain-")
    try:
        with open(os.path.join(work, "main.py"), "w") as f:
            f.write(CODE)
        out = subprocess.run([python, "-E", "-s", "-B", "main.py"], cwd=work, capture_output=True, text=True)
        assert out.stdout == EXPECTED, out
    finally:
        shutil.rmtree(work)
    return time.monotonic() - start


def isolated_run(sandbox: LocalSandbox) -> float:
    start = time.monotonic()
    r = sandbox.run(RunRequest(code=CODE, run_timeout=10))
    assert r.ok and r.run.stdout == EXPECTED, r
    return time.monotonic() - start


def cpu_seconds() -> tuple[float, float]:
    """(CPU of reaped child processes, CPU of this process) so far."""
    kids, me = resource.getrusage(resource.RUSAGE_CHILDREN), resource.getrusage(resource.RUSAGE_SELF)
    return kids.ru_utime + kids.ru_stime, me.ru_utime + me.ru_stime


def measure(one, runs: int, latency_runs: int, workers: int) -> tuple[float, float, float, float, float]:
    """(runs/s under load, p50 latency s, p99 latency s, child CPU s per run, own CPU s per run)."""
    for _ in range(3):
        one()  # warm the page cache
    lat = [one() for _ in range(latency_runs)]
    kids0, me0 = cpu_seconds()
    start = time.monotonic()
    with ThreadPoolExecutor(2 * workers) as ex:
        list(ex.map(lambda _: one(), range(runs)))
    rate = runs / (time.monotonic() - start)
    kids1, me1 = cpu_seconds()
    return rate, percentile(lat, 50), percentile(lat, 99), (kids1 - kids0) / runs, (me1 - me0) / runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--latency-runs", type=int, default=60)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args()
    python = Toolchain.find().need("python")
    load_before = os.getloadavg()[0]
    with LocalSandbox(max_workers=args.workers, max_queue=4 * args.workers) as sandbox:
        plain = measure(lambda: plain_run(python), args.runs, args.latency_runs, args.workers)
        iso = measure(lambda: isolated_run(sandbox), args.runs, args.latency_runs, args.workers)
        m = sandbox.metrics()
    print(f"program: {CODE!r} with {python}; {args.workers} workers on {os.cpu_count()} cores")
    print(f"load average before/after: {load_before:.2f} / {os.getloadavg()[0]:.2f} (other work on this machine)")
    print(f"{'mode':<10} {'runs/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'cpu ms/run':>11} {'max runs/s if idle':>19}")
    for name, (rate, p50, p99, kids, me) in (("plain", plain), ("isolated", iso)):
        cpu = kids + me  # programs and the sandbox tree, plus this process's own share
        ceiling = (os.cpu_count() or 1) / cpu if cpu else float("inf")
        print(f"{name:<10} {rate:>8.1f} {p50 * 1e3:>8.1f} {p99 * 1e3:>8.1f} {cpu * 1e3:>11.1f} {ceiling:>19.1f}")
    print(f"sandbox queue wait p50 {m['queue_wait_s_p50'] * 1e3:.1f} ms, run p50 {m['run_s_p50'] * 1e3:.1f} ms")
    print(f"overhead at p50: {(iso[1] - plain[1]) * 1e3:.1f} ms (target <= 20 ms)")
    print(f"isolated runs/s = {iso[0]:.1f} (target >= 50)")
    print(f"result: runs/s isolated/plain subprocess = {iso[0] / plain[0]:.2f} (target >= 0.4)")


if __name__ == "__main__":
    main()
