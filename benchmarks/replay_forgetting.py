"""Does replay prevent forgetting? RL on domain A, then RL on domain B, with replay 0 / 0.3 / 0.5.

    .venv/bin/python benchmarks/replay_forgetting.py [--model DIR] [--config configs/quickstart-tiny.yaml]
        [--a basic_arithmetic] [--b chain_sum] [--steps-a 100] [--steps-b 100] [--lr-a 3e-5] [--lr-b 3e-5]
        [--eval-n 200] [--out runs/bench/replay_forgetting] [--reuse-a]

Start model: `--model`, else `--config`'s SFT model (built once and cached by benchmarks/_models.py).
Phase A: `posttrain.recipes.rl.run` on A alone (the config's RL settings, `--steps-a` steps, the replay buffer
on, so it stores A's successes). Phase B, three times from phase A's final model with the same budget: RL on B
alone for `--steps-b` steps, its buffer seeded with phase A's (`buffer.load_from`), `buffer.replay_ratio`
0 / 0.3 / 0.5 (the share of each step's trained trajectories that are replayed stored successes). Held-out
greedy pass@1 of A and of B (the in-loop eval path, `--eval-n` tasks each, exact-number verifier) on the start
model, after A, and after each B run. What a user would otherwise do is RL on B without replay: that is the
peer. Last line: `result: A retained with replay 0.3 / without = X (target >= 1.2)`, retained = A's pass@1
after B / after A.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _models import ROOT, _config_path, sft_model, task_options  # noqa: E402

from posttrain.checkpoint import latest_checkpoint  # noqa: E402
from posttrain.config.base import load_config  # noqa: E402
from posttrain.config.common import DomainConfig
from posttrain.config.pipeline import PipelineConfig

console = Console(stderr=True, highlight=False)
RATIOS = (0.0, 0.3, 0.5)
VERIFIER = "numeric"


def domain(name: str, options: dict, eval_n: int) -> DomainConfig:
    return DomainConfig(name=name, options=options, eval_tasks=eval_n, verifiers=[VERIFIER])


def rl_config(args, model: str, tasks: list[DomainConfig], out: Path, steps: int, ratio: float, lr: float,
              load_from: str | None = None):
    cfg = load_config(PipelineConfig, _config_path(args.config)).rl.model_copy(deep=True)
    cfg.model.path, cfg.tasks, cfg.out_dir = model, tasks, str(out)
    cfg.train.steps, cfg.train.max_seconds, cfg.train.threads = steps, None, 1
    cfg.train.eval_every = cfg.train.save_every = steps
    cfg.optim.lr = lr
    cfg.buffer.enabled, cfg.buffer.replay_ratio, cfg.buffer.load_from = True, ratio, load_from
    cfg.logging.tensorboard, cfg.logging.progress = False, True
    cfg.monitor.rollout_log = False
    return cfg


def held_out(model: str, domains: list[DomainConfig]) -> dict[str, float]:
    """Greedy pass@1 per domain through the in-loop eval path (the paged engine, the verifier registry)."""
    from posttrain.eval.run import stop_ids
    from posttrain.eval.evaluate import evaluate_in_loop
    from posttrain.engine.registry import ENGINES
    from posttrain.tasks.mixture import build_mixture
    from posttrain.core.hf import load_tokenizer

    tokenizer = load_tokenizer(model)
    engine = ENGINES["paged"](model, tokenizer, dtype="float32")
    mixture = build_mixture(domains, task_seed=500_000, seed=0)
    sets = {s.domain: s.eval_tasks() for s in mixture.sources}
    out = evaluate_in_loop(engine, tokenizer, sets, stop_ids(tokenizer), 64)
    return {d.name: out[f"pass@1/{d.name}"] for d in domains}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model"), p.add_argument("--config", default="configs/quickstart-tiny.yaml")
    p.add_argument("--a", default="basic_arithmetic"), p.add_argument("--b", default="chain_sum")
    p.add_argument("--steps-a", type=int, default=100), p.add_argument("--steps-b", type=int, default=100)
    p.add_argument("--lr-a", type=float, default=3e-5), p.add_argument("--lr-b", type=float, default=3e-5)
    p.add_argument("--reuse-a", action="store_true", help="reuse OUT/a/final from an earlier run with the same phase A")
    p.add_argument("--eval-n", type=int, default=200), p.add_argument("--out", default="runs/bench/replay_forgetting")
    args = p.parse_args()
    torch.set_num_threads(1)
    start = sft_model(args.model, args.config)
    options = task_options(args.config, start, [args.a, args.b])
    A, B = domain(args.a, options[args.a], args.eval_n), domain(args.b, options[args.b], args.eval_n)
    out = Path(args.out) if Path(args.out).is_absolute() else ROOT / args.out
    from posttrain.recipes import rl

    rows = {"start": held_out(start, [A, B])}
    console.print(f"start: {rows['start']}")
    done_a = out / "a" / "final" / "config.json"
    if args.reuse_a and done_a.is_file():  # phase A depends only on the start model and its own options
        phase_a = done_a.parent
        console.print(f"reusing phase A: {phase_a}")
    else:
        shutil.rmtree(out / "a", ignore_errors=True)  # this benchmark's own outputs: each run starts clean
        phase_a = rl.run(rl_config(args, start, [A], out / "a", args.steps_a, 0.0, args.lr_a))
    rows["after A"] = held_out(str(phase_a), [A, B])
    console.print(f"after A: {rows['after A']}")
    stored = latest_checkpoint(out / "a") / "replay"
    for ratio in RATIOS:
        shutil.rmtree(out / f"b_replay{ratio}", ignore_errors=True)
        final = rl.run(rl_config(args, str(phase_a), [B], out / f"b_replay{ratio}", args.steps_b, ratio, args.lr_b,
                                 load_from=str(stored)))
        rows[f"after B, replay {ratio}"] = held_out(str(final), [A, B])
        console.print(f"after B, replay {ratio}: {rows[f'after B, replay {ratio}']}")

    table = Table(title=f"held-out greedy pass@1 ({args.eval_n} tasks each); A = {args.a}, B = {args.b}")
    for col in ("model", f"A {args.a}", f"B {args.b}", "A retained", "B gain"):
        table.add_column(col, justify="right" if col != "model" else "left")
    a0, b0 = rows["after A"][args.a], rows["after A"][args.b]
    retained = {}
    for name, r in rows.items():
        kept = r[args.a] / a0 if a0 else float("nan")
        if name.startswith("after B"):
            retained[name] = kept
        table.add_row(name, f"{r[args.a]:.3f}", f"{r[args.b]:.3f}", f"{kept:.2f}", f"{r[args.b] - b0:+.3f}")
    console.print(table)
    (out / "result.json").write_text(json.dumps({"args": vars(args), "pass@1": rows}, indent=1) + "\n")
    without, with_replay = retained["after B, replay 0.0"], retained["after B, replay 0.3"]
    ratio = with_replay / without if without else float("inf")
    print(f"result: A retained with replay 0.3 / without = {ratio:.2f} (target >= 1.2)")


if __name__ == "__main__":
    main()
