"""Agent episodes per minute: our per-episode async loop against a lock-step turn loop, in one run.

    .venv/bin/python benchmarks/agent_loop.py [--model DIR] [--episodes 64] [--samples 8] [--max-tokens 32]
        [--work-median 0.5] [--seed 0] [--rounds 1] [--json OUT]

The same 64 episodes (8 tasks x 8 samples, as an RL step's groups: half terminal, half BFCL
multi-turn function calling), the same engine (the
paged engine on SmolLM2-135M-Instruct, converted once with `posttrain models get`, or --model),
the same chat template bridges, through each loop:

- ours: `posttrain.envs.rollout.run_episodes`, what `rl` and `eval` run: every episode an asyncio
  task over one AsyncEngine; the engine batches whatever turns are ready while others wait on tools;
- lock-step (TRL's tool loop): each round, one `engine.generate` over every unfinished episode's
  next turn, then every episode's tool calls at once, and the next round starts when the slowest
  episode's tools are done.

The model's turns are sampled for real (a turn ends at its first newline, a short tool-call line,
or at --max-tokens, which ends the episode in both loops), but the actions executed are scripted, so both loops do the same tool work whatever the
model says: a terminal episode runs 2-6 shell commands in its own persistent bubblewrap session
(real commands over the task's files, each followed by `sleep t`, the wait on a build or a test
run: t log-normal per command, median --work-median seconds, sigma 1, capped at 8 s); a BFCL
episode runs its task's ground-truth calls, one per turn, in the episode's persistent sandboxed
runner of BFCL's API classes (envs/bfcl_session.py). Scripts and seeds are drawn from --seed; both loops get the same ones.

--fast-engine swaps the model for a random 2-layer one with SmolLM2's tokenizer (its turns end at any
of 1/8 of the vocabulary): an engine much faster than the tools, as a GPU engine is next to real
builds and test runs; the comparison on SmolLM2 itself is engine-bound on 2 CPU cores.

Episodes per minute = episodes / wall time of the loop (environments' start and close included).
Engine idle fraction = 1 - time inside the engine's step / generate over the wall time. The prefix
cache is reset before each loop; with --rounds N the loops alternate and each one's best time counts.

The last line is `result: episodes/min ours/lock-step = X (target >= 2)`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import sys
import time
import warnings
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore", category=FutureWarning)

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _models import ROOT, smollm2_model  # noqa: E402,F401  (also puts the repo on sys.path)

from posttrain.domains import load_domains  # noqa: E402
from posttrain.envs.env import Action, Resources, ToolCall, make_env, register_env  # noqa: E402
from posttrain.envs.episode import turn_seed  # noqa: E402
from posttrain.envs.rollout import chat_format, run_episodes  # noqa: E402
from posttrain.engine.client import AsyncEngine  # noqa: E402
from posttrain.engine.protocol import SamplingParams  # noqa: E402

load_domains()  # the task sources (sql, document, terminal, bfcl...) register here
console = Console(highlight=False, width=150)
COMMANDS = ["ls -la", "find . -type f | head -40", "wc -l $(find . -type f -name '*.*' | head -20) | tail -1",
            "head -30 $(ls | head -1) 2>/dev/null | tail -5", "python3 -c 'print(sum(i * i for i in range(200000)))'",
            "grep -rn 'def \\|int \\|main' . | head -20", "cat instruction.md 2>/dev/null; ls", "du -sh ."]
SCRIPTS: dict[str, list[Action]] = {}  # task id -> the actions its episode runs, in order


def say(msg: str) -> None:
    console.print(f"[dim]{time.strftime('%X')}[/] {msg}")


class ScriptedEnv:
    """Runs the task's scripted actions in the real env, one per sampled turn, whatever was sampled."""

    def __init__(self, inner_name: str, resources: Resources):
        self.inner = make_env(inner_name, resources)
        self.actions: list[Action] = []

    @property
    def tools(self):
        return self.inner.tools

    async def reset(self, task):
        self.actions = list(SCRIPTS[task.id])
        return await self.inner.reset(replace(task, env=self.inner_env(task)))

    @staticmethod
    def inner_env(task) -> str:
        return task.env.removeprefix("scripted_")

    async def step(self, action):
        scripted = self.actions.pop(0) if self.actions else Action(text="done", content="done")
        return await self.inner.step(scripted)

    def state(self):
        return self.inner.state()

    def score(self, task, state):
        return self.inner.score(task, state)

    async def close(self):
        await self.inner.close()


for _name in ("terminal", "bfcl"):
    register_env(f"scripted_{_name}")(lambda resources, n=_name: ScriptedEnv(n, resources))


def build_jobs(n: int, samples: int, seed: int, work_median: float, max_tokens: int):
    """n episodes: n / samples tasks (half terminal, half BFCL multi-turn), `samples` episodes each
    (an RL group); a terminal episode's commands and waits are drawn per episode."""
    from posttrain.envs.tools.parsers import get_parser
    from posttrain.tasks.registry import make_source_tasks

    rng = random.Random(seed)
    n_tasks = max(2, n // samples)
    terminal = make_source_tasks("terminal", None, 0, {})
    bfcl = make_source_tasks("bfcl_multi_turn_base", n_tasks - n_tasks // 2, seed, {})
    pythonic = get_parser("pythonic")
    jobs = []
    for i in range(n_tasks // 2):
        base = terminal[(seed + i) % len(terminal)]
        for j in range(samples):
            task = replace(base, id=f"{base.id}#{j}", env="scripted_terminal")
            actions = []
            for k in range(rng.randint(2, 6)):
                t = min(8.0, work_median * math.exp(rng.gauss(0.0, 1.0)))
                command = f"{rng.choice(COMMANDS)} >/dev/null 2>&1; sleep {t:.2f}; echo step {k} done"
                actions.append(Action(text="", tool_calls=(ToolCall("shell", {"command": command}, "call_0"),)))
            SCRIPTS[task.id] = actions
            jobs.append(task)
    for base in bfcl:
        actions = []
        for turn_calls in base.reference["ground_truth"]:
            for text in turn_calls:
                actions.append(Action(text="", tool_calls=pythonic.parse(f"[{text}]").tool_calls[:1]))
            actions.append(Action(text="next", content="next"))  # the user turn is over
        for j in range(samples):
            task = replace(base, id=f"{base.id}#{j}", env="scripted_bfcl")
            SCRIPTS[task.id] = actions
            jobs.append(task)
    # a turn ends at its first newline (a short tool-call line), at most max_tokens
    params = [SamplingParams(temperature=1.0, max_tokens=max_tokens, stop=("\n",), seed=seed * 1000 + j)
              for j in range(len(jobs))]
    return list(zip(jobs, params))


async def lockstep(engine, fmt, jobs, resources, stop_ids) -> tuple[int, float]:
    """TRL-style: one generate over all unfinished episodes per round, then everyone's tools."""
    envs = [make_env(task.env, resources) for task, _ in jobs]
    busy = 0.0
    try:
        starts = await asyncio.gather(*(env.reset(task) for env, (task, _) in zip(envs, jobs)))
        state = []
        for env, msgs in zip(envs, starts):
            ids, _, history, kwargs = fmt.prompt(msgs, env.tools)
            state.append({"ids": list(ids), "history": history, "kwargs": kwargs, "turn": 0})
        active = list(range(len(jobs)))
        tokens = 0
        while active:
            requests = [replace(jobs[i][1], seed=turn_seed(jobs[i][1].seed, state[i]["turn"]),
                                stop_token_ids=stop_ids + jobs[i][1].stop_token_ids) for i in active]
            t0 = time.perf_counter()
            outs = engine.generate([state[i]["ids"] for i in active], requests)
            busy += time.perf_counter() - t0
            texts = []
            for i, c in zip(active, outs):
                out = list(c.token_ids)
                last = fmt.tokenizer.decode(out[-1:]) if out else ""
                stop = last if last in fmt.tokenizer.all_special_tokens else None  # as run_episode decides
                texts.append((fmt.tokenizer.decode(out[:-1] if stop else out), stop))
                state[i]["ids"] += out
                tokens += len(out)
            steps = await asyncio.gather(*(envs[i].step(fmt.parser.parse(text)) for i, (text, _) in zip(active, texts)))
            still = []
            for i, c, (text, stop), (obs, done, _) in zip(active, outs, texts, steps):
                st = state[i]
                st["turn"] += 1
                if done or not obs or st["turn"] >= jobs[i][0].limits.max_turns or c.finish_reason == "length":
                    continue  # the episode's end, by the same rules as run_episode
                msgs = [{"role": o.role, "content": o.content, **({"name": o.name} if o.name else {})} for o in obs]
                bridge, _ = fmt.bridge(st["history"], text, stop, msgs, st["kwargs"])
                st["ids"] += bridge
                st["history"] = [*st["history"], {"role": "assistant", "content": text}, *msgs]
                still.append(i)
            active = still
        return tokens, busy
    finally:
        await asyncio.gather(*(env.close() for env in envs), return_exceptions=True)


def run_lockstep(engine, fmt, jobs, stop_ids) -> dict:
    engine.reset_prefix_cache()
    started = time.perf_counter()
    tokens, busy = asyncio.run(lockstep(engine, fmt, jobs, Resources(), tuple(stop_ids)))
    wall = time.perf_counter() - started
    return {"seconds": wall, "tokens": tokens, "idle": max(0.0, 1 - busy / wall)}


def run_ours(engine, fmt, jobs, stop_ids) -> dict:
    engine.reset_prefix_cache()
    jobs = [(t, replace(p, stop_token_ids=tuple(stop_ids) + p.stop_token_ids)) for t, p in jobs]

    async def main():
        client = AsyncEngine(engine)
        try:
            trajs = await run_episodes(client, fmt, jobs, version=0, resources=Resources())
            return trajs, client.idle_fraction()
        finally:
            client.close()

    started = time.perf_counter()
    trajs, idle = asyncio.run(main())
    wall = time.perf_counter() - started
    failed = [t for t in trajs if t.stop_reason in ("env_error", "infra_error")]
    if failed:
        raise SystemExit(f"agent_loop: {len(failed)} episodes failed, e.g. {failed[0].events}")
    from collections import Counter

    longest = {}
    for (task, _), t in zip(jobs, trajs):
        kind = task.env.removeprefix("scripted_")
        longest[kind] = max(longest.get(kind, 0.0), t.stats.get("episode_seconds", 0.0))
    return {"seconds": wall, "tokens": sum(sum(t.loss_mask) for t in trajs), "idle": idle,
            "turns": sum(t.turns for t in trajs) / len(trajs), "stops": dict(Counter(t.stop_reason for t in trajs)),
            "longest_episode_s": longest,
            "env_seconds": {k: sum(t.stats.get("env_seconds", 0.0) for (task, _), t in zip(jobs, trajs)
                                   if task.env == f"scripted_{k}") for k in longest}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=None, help="an HF model directory (default: SmolLM2-135M-Instruct)")
    p.add_argument("--fast-engine", action="store_true",
                   help="a random 2-layer model with SmolLM2's tokenizer instead: an engine fast next to the tools")
    p.add_argument("--episodes", type=int, default=64)
    p.add_argument("--samples", type=int, default=8, help="episodes per task (an RL group)")
    p.add_argument("--max-tokens", type=int, default=32, help="sampled tokens per turn at most")
    p.add_argument("--work-median", type=float, default=0.5, help="median seconds of a terminal command's wait")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    p.add_argument("--json", default=None)
    args = p.parse_args()

    import torch
    from transformers import AutoTokenizer

    from posttrain.eval.run import stop_ids
    from posttrain.engine.paged.factory import make_engine

    if args.threads:
        torch.set_num_threads(args.threads)
    model = args.model or smollm2_model(say)
    tok = AutoTokenizer.from_pretrained(model)
    jobs = build_jobs(args.episodes, args.samples, args.seed, args.work_median, args.max_tokens)
    if args.fast_engine:
        from posttrain.train.tiny import make_tiny_model

        engine = make_engine(make_tiny_model(tok, family="llama", seed=0, hidden_size=64, num_layers=2, num_heads=4,
                                             num_kv_heads=2, intermediate_size=128, max_position_embeddings=8192), tok)
        # its text is noise: a turn ends at any of 1/8 of the vocabulary (~8 tokens), as a short line would
        ends = tuple(range(7, len(tok), 8))
        jobs = [(t, replace(p, stop_token_ids=ends)) for t, p in jobs]
        model = "a random 2-layer llama (hidden 64) with SmolLM2's vocabulary"
    else:
        engine = make_engine(model, tok)
    fmt = chat_format(tok, [t for t, _ in jobs], "auto")
    stops = stop_ids(tok)
    n_term = sum(t.env == "scripted_terminal" for t, _ in jobs)
    say(f"{len(jobs)} episodes ({n_term} terminal, {len(jobs) - n_term} BFCL multi-turn, {args.samples} per task) "
        f"on {Path(model).name if not args.fast_engine else model}, {os.cpu_count()} cores")
    best: dict[str, dict] = {}
    for r in range(args.rounds):
        for name, fn in (("lock-step", run_lockstep), ("ours", run_ours)):
            res = fn(engine, fmt, jobs, stops)
            say(f"round {r + 1} {name}: {res['seconds']:.1f} s, engine idle {res['idle']:.0%}"
                + (f", stop reasons {res['stops']}, longest episode {res['longest_episode_s']}, "
                   f"env seconds {res['env_seconds']}" if "stops" in res else ""))
            if name not in best or res["seconds"] < best[name]["seconds"]:
                best[name] = res
    table = Table("loop", "seconds", "episodes/min", "sampled tokens", "engine idle")
    for name, res in best.items():
        res["episodes_per_min"] = 60 * len(jobs) / res["seconds"]
        table.add_row(name, f"{res['seconds']:.1f}", f"{res['episodes_per_min']:.1f}", str(res["tokens"]),
                      f"{res['idle']:.0%}")
    console.print(table)
    ratio = best["ours"]["episodes_per_min"] / best["lock-step"]["episodes_per_min"]
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": best, "ratio": ratio}, indent=1))
    print(f"result: episodes/min ours/lock-step = {ratio:.2f} (target >= 2)")


if __name__ == "__main__":
    main()
