"""Synchronous vs asynchronous RL on this machine's CPU: seconds per step, overlap, held-out pass@1.

    .venv/bin/python benchmarks/async_rl.py [--model smollm2|tiny] [--steps 8] [--pause abort]
        [--json OUT]

Both runs are `posttrain rl` itself (in a subprocess each, one after the other), with the same
config, seed and steps, differing only in `scheduler.max_staleness`: 0 (synchronous: roll out,
then train, then sync) and 1 (asynchronous: the next step's rollout overlaps this update, its
tokens one version stale and corrected by `algo.off_policy`, default tis). Model: SmolLM2-135M-
Instruct (converted once from its wheel) on chain_sum (2-3 one-digit terms), 8 prompts x 4
samples a step, 48 completion tokens; `--model tiny` uses a random 2-layer model instead (fast,
says nothing about pass@1).

Reported per run: seconds per step (the loop's time/step minus its held-out eval, averaged over
the steps), the overlap (time generation and training ran together / wall time, async only), and
held-out greedy pass@1 after the last step over `--eval-tasks` chain_sum tasks with its standard
error. The last line is `result: step time sync/async = X (target >= 1.3)`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _models import ROOT, smollm2_model  # noqa: E402

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

console = Console()


def tiny_model(out: Path) -> str:
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    path = out / "tiny"
    if not (path / "config.json").exists():
        tok = AutoTokenizer.from_pretrained(smollm2_model(console.print))
        cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                          bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
        LlamaForCausalLM(cfg).save_pretrained(path)
        tok.save_pretrained(path)
    return str(path)


def run(mode: str, model: str, out: Path, args) -> dict:
    tasks = [{"name": "chain_sum", "options": {"min_terms": 2, "max_terms": 3, "max_digits": 1},
              "eval_tasks": args.eval_tasks, "holdout": 400, "verifiers": ["numeric"]}]
    run_dir = out / f"{mode}-{Path(model).name}"
    shutil.rmtree(run_dir, ignore_errors=True)  # a fresh run every time
    cmd = [sys.executable, "-m", "posttrain.cli", "rl", f"model.path={model}", f"out_dir={run_dir}",
           f"tasks={json.dumps(tasks)}", f"rollout.prompts_per_step={args.prompts}", "rollout.samples_per_prompt=4",
           f"rollout.max_tokens={args.max_tokens}", f"train.steps={args.steps}", f"train.eval_every={args.steps}",
           f"train.save_every={args.steps}", "optim.lr=2e-6", "logging.tensorboard=false", "logging.progress=false",
           "buffer.replay_ratio=0", f"scheduler.max_staleness={0 if mode == 'sync' else 1}",
           f"cluster.weight_sync.pause={args.pause}"]
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{mode} run failed: {done.stderr.strip().splitlines()[-1]}")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line]
    steps = [r for r in rows if r["step"] > 0]
    per_step = sum(r["time/step"] - r.get("time/eval", 0.0) for r in steps) / len(steps)
    last = steps[-1]
    p, n = last["pass@1"], args.eval_tasks
    return {"mode": mode, "seconds_per_step": per_step, "wall_s": time.perf_counter() - t0,
            "overlap": sum(r.get("async/overlap_fraction", 0.0) for r in steps) / len(steps),
            "staleness_mean": sum(r.get("async/staleness_mean", 0.0) for r in steps) / len(steps),
            "pass@1": p, "pass@1_se": math.sqrt(max(p * (1 - p), 1e-12) / n), "score": last.get("score")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=["smollm2", "tiny"], default="smollm2")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--eval-tasks", type=int, default=64)
    ap.add_argument("--pause", choices=["finish", "abort", "continue"], default="abort")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    out = ROOT / "runs" / "bench" / "async_rl"
    model = smollm2_model(console.print) if args.model == "smollm2" else tiny_model(out)
    results = []
    for mode in ("sync", "async"):
        console.print(f"[bold]{mode}[/bold]: {args.steps} steps of posttrain rl on {args.model} ...")
        results.append(run(mode, model, out, args))
    table = Table("run", "s/step", "overlap", "staleness", "held-out pass@1", "wall s")
    for r in results:
        table.add_row(r["mode"], f"{r['seconds_per_step']:.2f}", f"{r['overlap']:.2f}", f"{r['staleness_mean']:.2f}",
                      f"{r['pass@1']:.3f} ± {r['pass@1_se']:.3f}", f"{r['wall_s']:.0f}")
    console.print(table)
    sync, asyn = results
    gap = abs(sync["pass@1"] - asyn["pass@1"])
    se = math.sqrt(sync["pass@1_se"] ** 2 + asyn["pass@1_se"] ** 2)
    console.print(f"held-out pass@1 gap {gap:.3f} vs one standard error of the difference {se:.3f}: "
                  f"{'equal within' if gap <= se else 'NOT within'} one SE")
    speedup = sync["seconds_per_step"] / asyn["seconds_per_step"]
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"results": results, "speedup": speedup, "model": args.model}, indent=1))
    print(f"result: step time sync/async = {speedup:.2f} (target >= 1.3)")


if __name__ == "__main__":
    main()
