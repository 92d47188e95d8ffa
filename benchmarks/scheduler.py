"""RL step scheduling: our Scheduler (lanes, over-provisioning, close: enough) vs FIFO static batching.

    .venv/bin/python benchmarks/scheduler.py [--steps 12] [--short 6] [--long 2] [--samples 4]
        [--short-tokens 48] [--long-tokens 64] [--max-staleness 4] [--max-attempts 3]
        [--hidden 64 --layers 2] [--threads 1] [--seed 0] [--json OUT] [--quick]

One run, one engine, the same task streams. The workload mixes two domains:

- `short`: single-turn tasks (one sampled turn of at most --short-tokens, environment
  `bench_short`: the prompt in, the turn out);
- `long`: 10-turn episodes (environment `bench_long`): after each of the first 9 turns, whatever
  the model said, the env runs a real command in the bubblewrap sandbox (posttrain.sandbox
  LocalSandbox: `sleep T; ls /usr/bin | wc -l; echo turn N`, T from 0.2 to 0.5 s seeded by the
  task and turn, so ~0.25-0.55 s per call with the sandbox's start) and answers with its output
  as a user message; the 10th turn ends the episode.

The model is a random Qwen2 (make_tiny_model, hidden --hidden, --layers layers) with a BPE
tokenizer of 400 tokens trained here; a turn ends at `<|im_end|>` or any of 1/8 of the
vocabulary (the random model rarely samples `<|im_end|>`; the agent benchmarks do the same),
i.e. ~8 tokens a turn. Rewards: verifier `bench_hash` scores a sample 1.0 when a seeded hash of
its sampled token ids, read as a number in [0, 1), is below its task's pass rate p, else 0.0;
p is drawn per task (seeded): 0.5 for half the tasks, 0.0 for 40% and 1.0 for 10%. With 4
samples a group has mixed scores (GRPO signal) with probability 0.5 x (1 - 2 x 0.5^4) = 0.44.

The two ways to fill --steps RL steps of prompts_per_step = --short + --long groups each
(no training: the weights never change; the policy version is bumped each step, so carried-over
episodes age and those older than --max-staleness versions are cancelled and re-queued):

- FIFO static batching: the tasks in arrival order (each batch --short short and --long long
  tasks, shuffled), one `posttrain.envs.rollout.rollout()` call per batch, waited for entirely
  (every episode, long or short) before the next; groups without signal are dropped;
- ours: `posttrain.rl.collect.Collector.collect` with `scheduler.close: enough`,
  `over_provision: 1.5`, lanes on (`long_share: 0.25`), dynamic sampling on (--max-attempts
  rounds, default the RL default 3; at most 4 x prompts_per_step groups a step): a step closes
  once prompts_per_step groups with signal are done, the unfinished tail carries over.
Both on the paged engine (speculative decoding off, --threads torch threads), FIFO first.

Measured per method: groups with signal per minute (FIFO: every signal group of its batches;
ours: the groups the steps hand the trainer, surplus left unfinished at the end not counted)
over the wall time of all steps; engine idle = 1 - (time inside the engine's step) / wall;
short-task p95 latency = seconds from a short group's enqueue (FIFO: its batch's start; ours:
the moment the scheduler drew it) to its last episode's end, over every finished short group
(FIFO's group is usable only when its batch ends: this measure is the kinder one to FIFO).

The last lines are the engine idle of ours (target < 10%) and
`result: signal groups/min ours/FIFO = X (target >= 1.5)`.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import sys
import tempfile
import time
import warnings
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore", category=FutureWarning)

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _models import ROOT  # noqa: E402,F401  (puts the repo on sys.path)

from posttrain.envs.env import Observation, StepResult, register_env  # noqa: E402
from posttrain.core.types import Limits, Score, Task  # noqa: E402
from posttrain.verifiers import register  # noqa: E402

console = Console(highlight=False, width=150)
LONG_TURNS = 10
ENDS: dict[str, float] = {}  # task id -> when its last episode so far ended (perf_counter)
TAKEN: dict[str, float] = {}  # task id -> when it was enqueued (handed out by its source / its batch began)
_SANDBOX = None
_POOL = ThreadPoolExecutor(64, thread_name_prefix="bench-sandbox")  # sandbox calls never queue behind 6 workers


def say(msg: str) -> None:
    console.print(f"[dim]{time.strftime('%X')}[/] {msg}")


def _unit(*parts) -> float:
    """A seeded number in [0, 1) from parts."""
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "big") / 2**64


# ------------------------------------------------------------------ the workload


@register("bench_hash")
def bench_hash(task: Task, traj) -> Score:
    """1.0 when the seeded hash of the sampled ids is below the task's pass rate p (see the docstring)."""
    u = _unit("reward", task.id, tuple(traj.token_ids[traj.prompt_len:]))
    return Score(float(u < task.reference["p"]), "bench_hash")


class ShortEnv:
    """bench_short: a single-turn task's prompt in, the one turn out; notes when the episode ended."""

    def __init__(self, resources):
        self.tools: list = []
        self.task_id = ""

    async def reset(self, task):
        self.task_id = task.id
        return list(task.prompt)

    async def step(self, action):
        ENDS[self.task_id] = max(ENDS.get(self.task_id, 0.0), time.perf_counter())
        return StepResult([], True, {})

    def state(self):
        return None

    def score(self, task, state):
        raise NotImplementedError("scored by bench_hash")

    async def close(self):
        pass


class LongEnv(ShortEnv):
    """bench_long: 10 turns whatever the model says; after turns 1-9 a real sandbox command (0.2-0.5 s)."""

    def __init__(self, resources):
        super().__init__(resources)
        self.resources, self.turn = resources, 0

    async def step(self, action):
        from posttrain.sandbox import RunRequest

        self.turn += 1
        if self.turn >= LONG_TURNS:
            ENDS[self.task_id] = max(ENDS.get(self.task_id, 0.0), time.perf_counter())
            return StepResult([], True, {"env_seconds": 0.0})
        wait = 0.2 + 0.3 * _unit("wait", self.task_id, self.turn)
        request = RunRequest(code=f"sleep {wait:.2f}; ls /usr/bin | wc -l; echo turn {self.turn}", language="bash")

        def run():
            t0 = time.perf_counter()
            try:
                return _SANDBOX.run(request), time.perf_counter() - t0
            finally:
                self.resources.busy_seconds += time.perf_counter() - t0

        result, seconds = await asyncio.get_running_loop().run_in_executor(_POOL, run)
        out = " ".join((result.run.stdout if result.run else "").split())
        return StepResult([Observation(f"$ ls /usr/bin | wc -l\n{out}", role="user")], False, {"env_seconds": seconds})


register_env("bench_short")(ShortEnv)
register_env("bench_long")(LongEnv)


def make_task(kind: str, i: int, seed: int, short_tokens: int, long_tokens: int) -> Task:
    u = _unit("p", seed, kind, i)
    p = 0.5 if u < 0.5 else 0.0 if u < 0.9 else 1.0
    a, b = (int(_unit(x, seed, kind, i) * 1000) for x in "ab")
    if kind == "short":
        prompt = f"Calculate {a} + {b}."
        limits = Limits(max_turns=1, max_new_tokens=short_tokens)
    else:
        prompt = f"Explore the machine: count the programs in /usr/bin, then report {a} + {b}."
        limits = Limits(max_turns=LONG_TURNS, max_new_tokens=long_tokens, seconds=300.0, tool_timeout=30.0)
    return Task(id=f"{kind}/{i}", domain=kind, prompt=({"role": "user", "content": prompt},), reference={"p": p},
                verifiers=("bench_hash",), env=f"bench_{kind}", limits=limits)


class StreamSource:
    """A domain's tasks in a fixed order (the same stream for both methods); notes each task's enqueue."""

    def __init__(self, kind: str, seed: int, short_tokens: int, long_tokens: int):
        self.domain, self.cursor = kind, 0
        self._make = lambda i: make_task(kind, i, seed, short_tokens, long_tokens)

    def take(self, n: int) -> list[Task]:
        out = [self._make(self.cursor + j) for j in range(n)]
        self.cursor += n
        now = time.perf_counter()
        for t in out:
            TAKEN.setdefault(t.id, now)
        return out

    def eval_tasks(self) -> list[Task]:
        return []

    def set_options(self, options) -> None:
        pass

    def state_dict(self) -> dict:
        return {"cursor": self.cursor}

    def load_state_dict(self, state: dict) -> None:
        self.cursor = int(state["cursor"])


class EngineClock:
    """Seconds spent inside the engine's step / generate (wraps the instance's methods)."""

    def __init__(self, engine):
        self.busy = 0.0
        for name in ("step", "generate"):
            inner = getattr(engine, name)

            def timed(*a, _inner=inner, **kw):
                t0 = time.perf_counter()
                try:
                    return _inner(*a, **kw)
                finally:
                    self.busy += time.perf_counter() - t0

            setattr(engine, name, timed)


def quantile(xs: list[float], q: float) -> float:
    from posttrain.rl.utilisation import quantile as _q

    return _q(xs, q)


def _begin(engine, clock):
    ENDS.clear()
    TAKEN.clear()
    engine.reset_prefix_cache()
    return time.perf_counter(), clock.busy


def _summary(name, wall, busy, started, signal: Counter, short_ids: list[str], extra: dict) -> dict:
    lat = [ENDS[t] - TAKEN[t] for t in short_ids if t in ENDS and t in TAKEN]
    n = sum(signal.values())
    return {"method": name, "seconds": wall, "groups_started": started, "signal_groups": n,
            "signal_by_domain": dict(signal), "signal_per_min": 60.0 * n / wall, "engine_idle": max(0.0, 1 - busy / wall),
            "short_p50_s": quantile(lat, 0.5), "short_p95_s": quantile(lat, 0.95), "short_groups": len(lat), **extra}


# ------------------------------------------------------------------ the two methods


def run_fifo(engine, tok, clock, args, stop_ids) -> dict:
    from posttrain.envs.rollout import rollout
    from posttrain.engine.protocol import SamplingParams
    from posttrain.verifiers import run_verifiers_many, task_score

    sources = {k: StreamSource(k, args.seed, args.short_tokens, args.long_tokens) for k in ("short", "long")}
    params = SamplingParams(temperature=1.0, max_tokens=max(args.short_tokens, args.long_tokens),
                            stop_token_ids=stop_ids)
    t0, busy0 = _begin(engine, clock)
    signal, short_ids, stops = Counter(), [], Counter()
    for b in range(args.steps):
        batch = sources["short"].take(args.short) + sources["long"].take(args.long)
        random.Random(f"arrival:{args.seed}:{b}").shuffle(batch)
        now = time.perf_counter()
        TAKEN.update({t.id: now for t in batch})  # enqueued when its batch starts
        seeds = [int(_unit("seed", t.id) * 2**40) for t in batch]
        groups = rollout(engine, tok, batch, [args.samples] * len(batch), params, seeds, version=b)
        for task, trajs in zip(batch, groups):
            raw = [task_score(s, task) if not e else None for s, e in run_verifiers_many(task, trajs)]
            stops.update(t.stop_reason for t in trajs)
            valid = [r for r in raw if r is not None]
            if len(valid) >= 2 and max(valid) > min(valid):
                signal[task.domain] += 1
            if task.domain == "short":
                short_ids.append(task.id)
        say(f"FIFO batch {b + 1}/{args.steps}: {time.perf_counter() - now:.1f} s, signal groups so far {dict(signal)}")
    wall, busy = time.perf_counter() - t0, clock.busy - busy0
    return _summary("FIFO static batching", wall, busy, args.steps * (args.short + args.long), signal, short_ids,
                    {"stop_reasons": dict(stops)})


def run_ours(engine, tok, clock, args, stop_ids, out_dir: Path) -> dict:
    from posttrain.config.base import validate
    from posttrain.config.rl import RLConfig
    from posttrain.rl.collect import Collector
    from posttrain.rl.plan import Planner
    from posttrain.rl.scoring import StepContext
    from posttrain.tasks.mixture import Mixture

    cfg = validate(RLConfig, {
        "out_dir": str(out_dir), "model": {"path": str(out_dir / "model")},
        "tasks": [{"name": "short", "weight": args.short}, {"name": "long", "weight": args.long}],
        "rollout": {"prompts_per_step": args.short + args.long, "samples_per_prompt": args.samples,
                    "max_tokens": max(args.short_tokens, args.long_tokens)},
        "scheduler": {"close": "enough", "over_provision": args.over_provision, "max_staleness": args.max_staleness,
                      "lanes": {"long_share": 0.25}},
        "dynamic_sampling": {"max_attempts": args.max_attempts},
        "buffer": {"enabled": False}, "reward": {"verify_workers": 2},
    }, "benchmarks/scheduler.py")
    sources = [StreamSource(k, args.seed, args.short_tokens, args.long_tokens) for k in ("short", "long")]
    mixture = Mixture(sources, [args.short, args.long], args.seed)
    ctx = StepContext(cfg, engine, tok, mixture, None, stop_ids=stop_ids, version=0)
    signal, short_ids, totals = Counter(), set(), Counter()
    waits: dict[str, list[float]] = {"fast": [], "long": []}
    planner = Planner(ctx, {})
    with Collector(ctx, planner) as sched:
        t0, busy0 = _begin(engine, clock)
        for step in range(args.steps):
            now = time.perf_counter()
            batch = sched.collect(planner.plan(step), 1.0)
            ctx.version += 1  # as after a weight sync: carried-over episodes age
            st = batch.stats
            for g in batch.kept:
                signal[g.task.domain] += 1
            short_ids |= {g.task.id for g in batch.kept + batch.generated if g.task.domain == "short"}
            for key in ("sched/groups_started", "sched/cancelled", "sched/requeued"):
                totals[key] += st.get(key, 0.0)
            for lane in waits:
                if f"sched/queue_wait_p95/{lane}" in st:
                    waits[lane].append(st[f"sched/queue_wait_p95/{lane}"])
            say(f"ours step {step + 1}/{args.steps}: {time.perf_counter() - now:.1f} s, kept {len(batch.kept)} "
                f"(short {sum(g.task.domain == 'short' for g in batch.kept)}), started {st['sched/groups_started']:.0f}, "
                f"rounds {st['rollout_attempts']}, carried {st['sched/carried_over']:.0f}, cancelled {st['sched/cancelled']:.0f}, "
                f"engine busy {st['sched/engine_busy']:.0%}, long-slot occupancy {st['sched/slot_occupancy']:.0%}")
        wall, busy = time.perf_counter() - t0, clock.busy - busy0
        ledger = dict(planner.ledger.counts)
    return _summary("ours (Scheduler, close: enough)", wall, busy, int(totals["sched/groups_started"]), signal,
                    sorted(short_ids), {"cancelled": int(totals["sched/cancelled"]), "ledger": ledger,
                                        "queue_wait_p95_max": {k: max(v, default=0.0) for k, v in waits.items()}})


# ------------------------------------------------------------------ main


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=12, help="RL steps (FIFO: batches)")
    p.add_argument("--short", type=int, default=6, help="short single-turn groups per step")
    p.add_argument("--long", type=int, default=2, help="long 10-turn groups per step")
    p.add_argument("--samples", type=int, default=4, help="samples per group")
    p.add_argument("--short-tokens", type=int, default=48, help="a short task's turn at most")
    p.add_argument("--long-tokens", type=int, default=64, help="a long episode's turn at most")
    p.add_argument("--max-staleness", type=int, default=4, help="versions a carried-over item may age")
    p.add_argument("--max-attempts", type=int, default=3, help="ours: draw rounds a step (dynamic_sampling)")
    p.add_argument("--over-provision", type=float, default=1.5, help="ours: groups started per group a step needs")
    p.add_argument("--hidden", type=int, default=64, help="the random model's width (64: make_tiny_model's own)")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None)
    p.add_argument("--quick", action="store_true", help="a small run for a smoke check (4 steps)")
    args = p.parse_args()
    if args.quick:
        args.steps = min(args.steps, 4)
    if args.steps < 1 or args.short < 0 or args.long < 0 or args.short + args.long < 1 or args.samples < 2:
        raise SystemExit("scheduler.py: --steps >= 1, --short + --long >= 1 and --samples >= 2 are needed")

    import torch

    from posttrain.engine.paged.factory import make_engine
    from posttrain.sandbox import LocalSandbox
    from posttrain.train.tiny import make_tiny_model, save_model
    from posttrain.train.tokenizer import build_tokenizer

    global _SANDBOX
    torch.set_num_threads(args.threads)
    _SANDBOX = LocalSandbox(max_workers=64, max_queue=1024)
    with tempfile.TemporaryDirectory(prefix="bench-sched-") as tmp:
        out = Path(tmp)
        rng = random.Random(1234)
        corpus = [f"Calculate {a} + {b}.\nWe add {a} and {b} to get {a + b}.\nAnswer: {a + b}"
                  for a, b in ((rng.randint(0, 999), rng.randint(0, 999)) for _ in range(400))]
        tok = build_tokenizer(corpus, vocab_size=400)
        model = make_tiny_model(tok, family="qwen2", seed=0, hidden_size=args.hidden, num_layers=args.layers,
                                num_heads=4, num_kv_heads=2, intermediate_size=2 * args.hidden)
        path = save_model(model, tok, out / "model")
        engine = make_engine(str(path), tok, speculative=None)
        clock = EngineClock(engine)
        end = tok.convert_tokens_to_ids("<|im_end|>")
        stop_ids = tuple(sorted({end, *range(5, len(tok), 8)}))
        say(f"random qwen2 hidden {args.hidden} x {args.layers} layers, vocab {len(tok)}, {os.cpu_count()} cores, "
            f"{args.threads} torch thread(s); {args.steps} steps x ({args.short} short + {args.long} long) groups "
            f"of {args.samples}")
        from posttrain.envs.rollout import rollout
        from posttrain.engine.protocol import SamplingParams

        warm = [make_task("short", -1 - i, args.seed, 8, 8) for i in range(2)]  # warm-up (first-call costs)
        rollout(engine, tok, warm, [2, 2], SamplingParams(max_tokens=8, stop_token_ids=stop_ids), [0, 10], 0)
        results = [run_fifo(engine, tok, clock, args, stop_ids), run_ours(engine, tok, clock, args, stop_ids, out)]
    table = Table("method", "seconds", "groups started", "signal groups (short/long)", "signal groups/min",
                  "engine idle", "short p50 s", "short p95 s")
    for r in results:
        d = r["signal_by_domain"]
        table.add_row(r["method"], f"{r['seconds']:.1f}", str(r["groups_started"]),
                      f"{r['signal_groups']} ({d.get('short', 0)}/{d.get('long', 0)})", f"{r['signal_per_min']:.1f}",
                      f"{r['engine_idle']:.0%}", f"{r['short_p50_s']:.2f}", f"{r['short_p95_s']:.2f}")
    console.print(table)
    fifo, ours = results
    say(f"FIFO stop reasons {fifo['stop_reasons']}; ours: cancelled {ours['cancelled']}, ledger {ours['ledger']}, "
        f"worst step queue-wait p95 per lane {ours['queue_wait_p95_max']}")
    ratio = ours["signal_per_min"] / max(1e-9, fifo["signal_per_min"])
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": results, "ratio": ratio}, indent=1))
    print(f"engine idle ours = {ours['engine_idle']:.1%} (FIFO {fifo['engine_idle']:.1%}) (target < 10%)")
    print(f"result: signal groups/min ours/FIFO = {ratio:.2f} (target >= 1.5)")


if __name__ == "__main__":
    main()
