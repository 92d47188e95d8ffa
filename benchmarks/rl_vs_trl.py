"""RL step time and final pass@1: our RL recipe vs TRL's GRPOTrainer, on CPU, in one run.

    .venv/bin/python benchmarks/rl_vs_trl.py [--model DIR] [--config configs/quickstart-tiny.yaml]
        [--steps 20] [--prompts 16] [--group 8] [--lr 2e-5] [--max-tokens 64] [--threads 1] [--eval-n 200]
        [--only ours_nods,ours,trl] [--out runs/bench/rl_vs_trl] [--quick] [--holdout N] [--rollout-weights auto]

Start model: `--model`, else `--config`'s SFT model (its base + SFT stages, built once and cached under
.cache/posttrain/bench/ by benchmarks/_models.py). Shared by all runs: start model, tasks (reasoning-gym
basic_arithmetic + chain_sum, `--config`'s `task_options`), reward (the exact-number `numeric` verifier: ours via
`DomainConfig(verifiers=["numeric"])`, TRL's reward function calls it too), `--prompts` x `--group` completions
per step, constant lr (AdamW 0.9/0.95, clip 1.0), temperature 1.0, no KL, clip 0.2/0.28, token-mean loss,
group-normalised advantages, 1 torch thread (2-thread torch ops stall 10-40x on a shared 2-core machine).
Runs (one process, one thread each, taking turns one step at a time so other jobs' load hits them alike):
- ours_nods: `posttrain.recipes.rl.run`, dynamic sampling off: TRL's rollout work per step; the headline, last
  line `result: step time TRL/ours = X (target >= 2)` (replay at its default: ~30% of the groups are 1
  replayed success + 7 fresh samples);
- ours: its defaults (dynamic sampling on: groups whose samples all agree are dropped and refilled), the trade;
- trl: GRPOTrainer (plain HF generate), per_device_train_batch_size = prompts x group, no accumulation:
  each optimizer step generates and trains on exactly that (checked by counting reward calls), on the
  tasks our mixture draws for each step's first attempt.
s/step: mean (and median) after the first 2 steps; ours `time/step` - `time/eval`, TRL on_step_begin ->
on_step_end, phases by timing `_generate`, `_calculate_rewards`, `_generate_and_score_completions`.
Final pass@1: the eval harness (greedy, held-out, `--eval-n` per domain, same task_options) on the start
model and each final model; ours vs TRL within one standard error of the difference (unpaired).
Profile: `python -m cProfile -s cumulative benchmarks/rl_vs_trl.py --only ours` (the first run is in the main thread).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import sys
import threading
import time
import warnings
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore", category=FutureWarning)  # transformers 5.x renames inside TRL

import torch  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from posttrain.config.common import DomainConfig, LoggingConfig, ModelConfig, OptimConfig
from posttrain.config.eval import EvalConfig
from posttrain.config.rl import (
    DynamicSamplingConfig, RLConfig, RLTrainConfig, RolloutConfig, TemperatureConfig,
)
from posttrain.core.errors import PosttrainError  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _models import sft_model, task_options  # noqa: E402

DOMAINS = ("basic_arithmetic", "chain_sum")
VERIFIER = "numeric"  # exact-number reward on both sides
WARMUP_STEPS = 2  # steps left out of the steady-state mean
NAMES = {"ours_nods": "ours, DS off (replay on)", "ours": "ours, defaults (DS on, replay)", "trl": "TRL GRPOTrainer"}
OPTIONS: dict[str, dict] = {}  # domain -> reasoning-gym options, from --config's task_options (set in main)
console = Console(highlight=False, width=160)
stderr = lambda p, n: (p * (1 - p) / n) ** 0.5  # noqa: E731  (of a pass rate p measured on n tasks)


class Turns:
    """Runs take turns, one step each, so that load from other jobs on the machine hits them alike.
    A run holds the turn from `wait` until `pass_turn`; waiting happens outside every timed region."""

    def __init__(self, names: list[str]):
        self.order, self.done, self.i, self.cond = list(names), set(), 0, threading.Condition()

    def wait(self, name: str) -> None:
        with self.cond:
            self.cond.wait_for(lambda: self.order[self.i] == name)

    def _advance(self, name: str) -> None:  # to the next run not done (back to `name` when it is the last)
        for _ in range(len(self.order) if self.order[self.i] == name else 0):
            self.i = (self.i + 1) % len(self.order)
            if self.order[self.i] not in self.done:
                break
        self.cond.notify_all()

    def pass_turn(self, name: str) -> None:
        with self.cond:
            self._advance(name)
        self.wait(name)

    def finish(self, name: str) -> None:
        with self.cond:
            self.done.add(name)
            self._advance(name)


TURNS: Turns | None = None  # set while the runs train interleaved
take_turns = lambda name: TURNS is not None and TURNS.pass_turn(name)  # noqa: E731
log = lambda msg: console.print(f"[dim]{time.strftime('%X')} load {os.getloadavg()[0]:.2f}[/] {msg}")  # noqa: E731


def steady(xs: list[float]) -> dict[str, float]:
    """Mean and median of the steps after the first WARMUP_STEPS."""
    tail = sorted(xs[WARMUP_STEPS:] or xs)
    return {"s_per_step": sum(tail) / len(tail), "median": (tail[(len(tail) - 1) // 2] + tail[len(tail) // 2]) / 2}


def rl_config(args, out_dir: Path, dynamic_sampling: bool) -> RLConfig:
    """Our recipe's defaults except what the runs share (and no in-loop eval, no checkpoints but the final)."""
    return RLConfig(
        out_dir=str(out_dir), model=ModelConfig(path=args.model),
        tasks=[DomainConfig(name=d, options=OPTIONS[d], eval_tasks=0, verifiers=[VERIFIER], holdout=args.holdout)
               for d in DOMAINS],
        rollout=RolloutConfig(prompts_per_step=args.prompts, samples_per_prompt=args.group, max_tokens=args.max_tokens,
                              weights=args.rollout_weights,
                              temperature=TemperatureConfig(schedule="constant", start=1.0, end=1.0)),
        dynamic_sampling=DynamicSamplingConfig(enabled=dynamic_sampling),
        optim=OptimConfig(lr=args.lr, warmup_steps=0, schedule="constant"),
        train=RLTrainConfig(steps=args.steps, eval_every=args.steps + 1, save_every=args.steps + 1,
                            threads=args.ours_threads),
        logging=LoggingConfig(tensorboard=False, progress=False))


TRL_THREADS = [1]  # torch threads for TRL's steps (set at each step begin)
GENERATED: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)  # run -> step -> count


def hook_ours() -> None:
    """Count completions per step at the engine (all attempts); pass the turn after each metrics line."""
    from posttrain.recipes import rl
    from posttrain.engine.registry import ENGINES

    def counting(original):
        def counting_engine(*a, **kw):
            engine, counter = original(*a, **kw), GENERATED[threading.current_thread().name]
            generate = engine.generate
            def counted(prompts, params):
                counter[engine.version] += len(prompts)  # version == index of the step being collected
                return generate(prompts, params)
            engine.generate = counted
            return engine
        return counting_engine

    class TurnLogger(rl.MetricsLogger):
        def log(self, step, metrics):
            super().log(step, metrics)
            take_turns(threading.current_thread().name)

    ENGINES["hf"], ENGINES["paged"] = counting(ENGINES["hf"]), counting(ENGINES["paged"])
    rl.MetricsLogger = TurnLogger


def run_ours(args, out_dir: Path, dynamic_sampling: bool) -> dict:
    from posttrain.recipes import rl
    final = rl.run(rl_config(args, out_dir, dynamic_sampling))
    generated = GENERATED[threading.current_thread().name]
    rows = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rows = sorted((r for r in rows if r.get("step", 0) >= 1 and "time/step" in r), key=lambda r: r["step"])
    step_s = [r["time/step"] - r.get("time/eval", 0.0) for r in rows]
    tail = rows[WARMUP_STEPS:] or rows
    phase = lambda *keys: sum(r.get(k, 0.0) for r in tail for k in keys) / len(tail)  # noqa: E731
    out = {"final": final, "step_s": step_s, **steady(step_s),
           "rollout": phase("time/rollout"), "verify": phase("time/verify"),
           "update": phase("time/logprobs", "time/update"), "sync": phase("time/sync"),
           "completions": sum(generated[r["step"] - 1] for r in tail) / len(tail),
           "attempts": phase("rollout_attempts"), "filtered": phase("filtered_groups"),  # groups trained with signal:
           "signal": sum(min(args.prompts, r["generated_groups"] - r["filtered_groups"]) if dynamic_sampling
                         else r["generated_groups"] * (1 - r["zero_variance_frac"]) for r in tail) / len(tail)}
    out["other"] = out["s_per_step"] - out["rollout"] - out["verify"] - out["update"]
    return out


def run_trl(args, out_dir: Path) -> dict:
    import datasets
    from transformers import PrinterCallback, TrainerCallback
    from transformers.utils import logging as hf_logging
    from trl import GRPOConfig, GRPOTrainer

    from posttrain.tasks.mixture import build_mixture
    from posttrain.core.hf import load_model, load_tokenizer, pick_device
    from posttrain.core.types import Trajectory
    from posttrain.verifiers import get_verifier

    for quiet in (hf_logging.set_verbosity_error, hf_logging.disable_progress_bar, datasets.disable_progress_bars):
        quiet()
    cfg = rl_config(args, out_dir, True)  # the tasks our mixture draws for each step's first attempt, in step order
    mixture = build_mixture(cfg.tasks, task_seed=cfg.train.task_seed, seed=cfg.train.seed)
    tasks = [t for step in range(args.steps) for t in mixture.sample(args.prompts, step, 0)]
    by_id = {t.id: t for t in tasks}
    data = datasets.Dataset.from_list([{"prompt": [dict(m) for m in t.prompt], "task_id": t.id} for t in tasks])
    calls: dict[int, list] = collections.defaultdict(list)  # step -> (completions, distinct task ids) per call
    verify = get_verifier(VERIFIER)  # the verifier our recipe scores with; None (cannot judge) counts as 0

    def numeric_reward(prompts, completions, task_id, trainer_state=None, **_):
        calls[trainer_state.global_step].append((len(completions), len(set(task_id))))
        scores = [verify(by_id[tid], Trajectory(task_id=tid, token_ids=(), loss_mask=(), logprobs=(), prompt_len=0,
                                                text=c[-1]["content"])) for tid, c in zip(task_id, completions)]
        return [0.0 if sc is None else sc.value for sc in scores]

    per_step, cuda = args.prompts * args.group, torch.cuda.is_available()  # CUDA: bf16, as ours (dtype auto)
    config = GRPOConfig(
        output_dir=str(out_dir), per_device_train_batch_size=per_step, gradient_accumulation_steps=1,
        num_generations=args.group, max_completion_length=args.max_tokens, learning_rate=args.lr,
        lr_scheduler_type="constant", warmup_steps=0, adam_beta1=0.9, adam_beta2=0.95, weight_decay=0.0,
        max_grad_norm=1.0, max_steps=args.steps, beta=0.0, temperature=1.0, top_p=1.0, epsilon=0.2,
        epsilon_high=0.28, loss_type="dapo", scale_rewards="group", num_iterations=1, shuffle_dataset=False,
        logging_steps=1, save_strategy="no", report_to=[], use_cpu=not cuda, bf16=cuda, fp16=False, seed=0,
        dataloader_num_workers=0, disable_tqdm=True, log_completions=False)
    if (config.steps_per_generation, config.generation_batch_size) != (1, per_step):
        raise SystemExit(f"TRL batch mapping: steps_per_generation={config.steps_per_generation}, "
                         f"generation_batch_size={config.generation_batch_size}, expected 1 and {per_step}")
    model, tokenizer = load_model(args.model, dtype="auto", device=pick_device()), load_tokenizer(args.model)
    trainer = GRPOTrainer(model=model, reward_funcs=[numeric_reward], args=config, train_dataset=data,
                          processing_class=tokenizer)
    phases: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)  # name -> step -> s

    def timed(name: str, fn):
        def wrapper(*a, **kw):
            started = time.perf_counter()
            out = fn(*a, **kw)
            phases[name][trainer.state.global_step] += time.perf_counter() - started
            return out
        return wrapper
    for name in ("_generate", "_calculate_rewards", "_generate_and_score_completions"):
        setattr(trainer, name, timed(name, getattr(trainer, name)))

    times: list[float] = []  # seconds per optimizer step

    class StepTimer(TrainerCallback):
        def on_train_begin(self, a, state, control, **kw):
            take_turns(threading.current_thread().name)  # set-up done: pass the turn

        def on_step_begin(self, a, state, control, **kw):
            torch.set_num_threads(TRL_THREADS[0])  # ours may have left another count (threads are per process)
            self.started = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            times.append(time.perf_counter() - self.started)
            take_turns(threading.current_thread().name)

    trainer.add_callback(StepTimer())
    trainer.remove_callback(PrinterCallback)  # its per-step log dicts; the table below has what matters
    trainer.train()
    zero_std = {h["step"]: h["frac_reward_zero_std"] for h in trainer.state.log_history if "frac_reward_zero_std" in h}
    final = out_dir / "final"
    trainer.save_model(str(final))
    tokenizer.save_pretrained(str(final))
    bad = {s: c for s, c in calls.items() if c != [(per_step, args.prompts)]}
    if len(calls) != args.steps or bad:
        raise SystemExit(f"TRL did not score {args.prompts} prompts x {args.group} completions in one call per step: "
                         f"{len(calls)} steps scored, e.g. {next(iter(bad.items()), None)}")
    steps = range(WARMUP_STEPS, args.steps) if args.steps > WARMUP_STEPS else range(args.steps)
    phase = lambda name: sum(phases[name][s] for s in steps) / len(steps)  # noqa: E731
    out = {"final": final, "step_s": times, **steady(times),
           "rollout": phase("_generate"), "verify": phase("_calculate_rewards"),
           "completions": sum(n for s in steps for n, _ in calls[s]) / len(steps),
           "signal": args.prompts * (1 - sum(zero_std[s + 1] for s in steps) / len(steps))}
    out["update"] = out["s_per_step"] - phase("_generate_and_score_completions")
    out["other"] = phase("_generate_and_score_completions") - out["rollout"] - out["verify"]
    return out


def evaluate(model: str, n: int, out: Path) -> float:
    from posttrain.eval.run import run
    cfg = EvalConfig(model=str(model), tasks=",".join(DOMAINS), n_per_domain=n,
                     task_options={d: OPTIONS[d] for d in DOMAINS}, out=str(out))
    return run(cfg)["overall"]["pass@1"]


def compare_pass(args, results: dict[str, dict]) -> None:
    """Each of our runs against TRL: ours >= TRL - one standard error of the difference (unpaired)?"""
    n, trl = args.eval_n * len(DOMAINS), results.get(NAMES["trl"], {}).get("pass@1")
    for key in ("ours_nods", "ours") if trl is not None else ():
        if (ours := results.get(NAMES[key], {}).get("pass@1")) is not None:
            se = (stderr(ours, n) ** 2 + stderr(trl, n) ** 2) ** 0.5
            console.print(f"pass@1 {NAMES[key]} {ours:.3f} vs TRL {trl:.3f}: difference {ours - trl:+.3f}, "
                          f"one standard error {se:.3f} ({n} tasks each) -> ours equal or better within 1 SE: "
                          f"{'yes' if ours >= trl - se else 'NO'}")


def report(args, results: dict[str, dict], start_pass: float | None, load_start: tuple) -> None:
    table = Table(title=f"RL, {args.prompts} prompts x {args.group} samples/step, {args.steps} steps, "
                        f"lr {args.lr}, <= {args.max_tokens} tokens, {torch.get_num_threads()} torch threads "
                        f"(s/step: mean of steps {WARMUP_STEPS + 1}..{args.steps})")
    for col in ("run", "s/step", "median", "rollout", "verify", "update", "other", "completions/step", "signal groups",
                "s/signal group", "pass@1"):
        table.add_column(col, justify="left" if col == "run" else "right")
    fmt = lambda x: f"{x:.2f}" if x is not None else "-"  # noqa: E731
    se = lambda p: f"{p:.3f} ±{stderr(p, args.eval_n * len(DOMAINS)):.3f}" if p is not None else "-"  # noqa: E731
    table.add_row("SFT start model", *["-"] * 9, se(start_pass))
    for name, r in results.items():
        times = [fmt(r[k]) for k in ("s_per_step", "median", "rollout", "verify", "update", "other")]
        table.add_row(name, *times, f"{r['completions']:.0f}", f"{r['signal']:.1f}",
                      fmt(r["s_per_step"] / r["signal"]) if r["signal"] else "-", se(r.get("pass@1")))
    console.print(table)
    console.print("runs interleaved one step at a time; DS: dynamic sampling; s/step: mean; "
                  "phases: means; signal groups: groups trained on whose rewards differ (the rest give no gradient); "
                  "s/signal group = s/step / signal groups; pass@1: eval harness, greedy, "
                  f"{args.eval_n} held-out tasks per domain, ± one standard error")
    console.print(f"tasks: {', '.join(f'{d} {OPTIONS[d]}' for d in DOMAINS)} (from {args.config}); reward: the "
                  f"{VERIFIER!r} verifier on both sides (exact number, no partial credit)")
    console.print("phases (s/step): ours rollout = time/rollout, verify = time/verify, update = time/logprobs + "
                  "time/update, other = sync + bookkeeping; TRL rollout = _generate, verify = _calculate_rewards, "
                  "update = step - _generate_and_score_completions, other = the rest of the latter")
    for name, r in results.items():
        extra = f", rollout attempts {r['attempts']:.2f}, dropped groups {r['filtered']:.1f}" if "attempts" in r else ""
        console.print(f"{name}: per-step seconds {' '.join(f'{x:.2f}' for x in r['step_s'])}{extra}")
    if NAMES["trl"] in results:
        console.print(f"TRL: the reward function was called once per step with {args.prompts * args.group} completions "
                      f"of {args.prompts} distinct prompts, every step (checked)")
    console.print(f"load average at start {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}, at end "
                  f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs (shared with other "
                  f"jobs: their load slows and scatters every run's steps); {torch.get_num_threads()} torch thread(s): "
                  "here 2-thread torch ops were measured to stall 10-40x when another job holds a core (--threads 1)")
    compare_pass(args, results)


def train_all(args, chosen: list[str], out: Path) -> dict[str, dict]:
    """Each run in a thread named by its key (the first in this one), interleaved one step at a time."""
    global TURNS
    hook_ours()
    TURNS = Turns(chosen)
    results, errors = {}, []  # key -> the run's numbers; exceptions raised in the runs' threads

    def one(key: str) -> None:
        try:
            TURNS.wait(key)
            shutil.rmtree(out / key, ignore_errors=True)
            log(f"training: {NAMES[key]}")
            started = time.perf_counter()
            results[key] = run_trl(args, out / key) if key == "trl" else run_ours(args, out / key, key == "ours")
            log(f"{NAMES[key]}: done, {time.perf_counter() - started:.0f} s in all (waits for turns included)")
        except BaseException as e:  # noqa: BLE001  (re-raised in the main thread)
            errors.append(e)
        finally:
            TURNS.finish(key)

    threads = [threading.Thread(target=one, args=(key,), name=key) for key in chosen[1:]]
    [t.start() for t in threads]
    threading.current_thread().name = chosen[0]  # the first run trains in this thread (cProfile sees only it)
    one(chosen[0])
    [t.join() for t in threads]
    threading.current_thread().name = "MainThread"
    TURNS = None
    if errors:
        raise errors[0]
    return {NAMES[key]: results[key] for key in chosen}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None, help="start model (default: --config's SFT model, built and cached)")
    p.add_argument("--config", default="configs/quickstart-tiny.yaml", help="pipeline config whose task_options to use")
    for flag, kind, default in (("--steps", int, 20), ("--prompts", int, 16), ("--group", int, 8),
                                ("--lr", float, 2e-5), ("--max-tokens", int, 64)):
        p.add_argument(flag, type=kind, default=default)
    p.add_argument("--threads", type=int, default=1, help="torch threads (1: 2 threads stall 10-40x on a busy machine)")
    p.add_argument("--ours-threads", default=None,
                   help="ours: an int, or auto (rollout and update each pick 1 or --threads by measured time); default --threads")
    p.add_argument("--rollout-weights", default="auto", choices=["auto", "exact", "bf16", "int8"],
                   help="ours: rollout.weights (auto: bf16/int8 rollout weights for models of 20M+ weights)")
    p.add_argument("--holdout", type=int, default=None,
                   help="held-out questions per domain (default: the eval items; configs/smollm2-rl.yaml's options need 200)")
    p.add_argument("--eval-n", type=int, default=200, help="held-out tasks per domain for the final pass@1 (0: skip)")
    p.add_argument("--out", default="runs/bench/rl_vs_trl")
    p.add_argument("--only", default="ours_nods,ours,trl", help="comma list of ours_nods, ours, trl")
    p.add_argument("--quick", action="store_true", help="--steps 10 --eval-n 50 (about half the time)")
    args = p.parse_args()
    if args.quick:
        args.steps, args.eval_n = 10, 50
    try:
        args.model = sft_model(args.model, args.config)
    except PosttrainError as e:  # e.g. a missing or malformed --config: one line, no traceback
        sys.exit(f"error: {e}")
    load_start = os.getloadavg()
    torch.set_num_threads(args.threads)
    TRL_THREADS[0] = args.threads
    args.ours_threads = args.threads if args.ours_threads is None else (
        "auto" if args.ours_threads == "auto" else int(args.ours_threads))
    torch.manual_seed(0)
    log(f"torch threads {torch.get_num_threads()}, {os.cpu_count()} CPUs, load average "
        f"{load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f} (the machine is shared with other jobs)")
    try:
        OPTIONS.update(task_options(args.config, args.model, DOMAINS))
    except PosttrainError as e:  # e.g. a missing or malformed --config: one line, no traceback
        sys.exit(f"error: {e}")
    out, chosen = Path(args.out), [n for n in args.only.split(",") if n]
    if any(n not in NAMES for n in chosen):
        sys.exit(f"error: --only takes {', '.join(NAMES)}; got {args.only!r}")
    results, start_pass = train_all(args, chosen, out), None
    if args.eval_n:
        log(f"eval harness: greedy pass@1 on {args.eval_n} held-out tasks per domain")
        start_pass = evaluate(args.model, args.eval_n, out / "eval" / "start.json")
        for key, row in ((k, results[NAMES[k]]) for k in chosen):
            row["pass@1"] = evaluate(row["final"], args.eval_n, out / "eval" / f"{key}.json")
    report(args, results, start_pass, load_start)
    trl, ours, nods = (results.get(NAMES[k], {}).get("s_per_step") for k in ("trl", "ours", "ours_nods"))
    if trl and ours:
        console.print(f"with dynamic sampling on (not equal work: see completions/step): TRL/ours = {trl / ours:.2f}")
    ratio = f"{trl / nods:.2f}" if trl and nods else f"not measured (--only {args.only})"
    print(f"result: step time TRL/ours = {ratio} (target >= 2; equal work: ours with dynamic sampling off)")


if __name__ == "__main__":
    main()
