"""`posttrain eval`: a model on held-out tasks -> pass@1 / pass@K per domain with 95% intervals, as JSON.

    run(EvalConfig(model="runs/sft/final", tasks="basic_arithmetic:100,chain_sum,data/qa.jsonl", samples=4))

The same code path as the RL loop's held-out eval (suite.py `evaluate_tasks`): the rollout
Engine named by `cfg.engine` (`paged`, the built-in engine, by default; `hf` the reference),
the single-turn environment and the verifier registry. Tasks (sources.py): reasoning-gym domains
from seeds starting at `cfg.seed` (1_000_000 by default; training data stays below that and skips
held-out questions), JSONL task files and HumanEval-format code files (verified by `code` in the
sandbox). Completions stop at the tokenizer's and model's end-of-sequence ids and at <|im_end|> /
<|endoftext|>. Writes, each atomically (a failed run leaves earlier files as they were):

    cfg.out   {"model": path, "label": name, "suite": name | null, "engine": name, "samples": K,
               "metrics": ["pass@1", "pass@k", ...], "seed": int, "temperature": float,
               "top_p": float, "max_tokens": int, "tasks": spec,
               "domains": {NAME: {"n", "pass@1", "pass@1_ci95": [lo, hi], "pass@k", "pass@k_ci95",
                                  "mean_length", "verifier_errors"}},
               "overall": {the same keys: n = all tasks, pass@k = mean over domains},
               "per_task": {TASK_ID: {"domain", "correct": samples correct, "samples": K}},
               ...extra tables (analyses.py: "long_context", "safety") when their tasks are in the spec}
              (pass@k for each k of cfg.k, default 1 and K; intervals and overall as documented in suite.py)
    <out stem>.completions.jsonl   one line per sample: id, domain, sample, completion, score,
                                   correct, finish_reason, num_tokens, prompt_tokens, scores (per
                                   verifier), errors, events (violations)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from posttrain.config.eval import EvalConfig
from posttrain.core.errors import ConfigError
from posttrain.eval.analyses import run_analyses
from posttrain.eval.sources import load_spec, parse_spec
from posttrain.eval.evaluate import CORRECT, EvalResult, evaluate_tasks
from posttrain.core.fsio import write_text_atomic
from posttrain.telemetry.progress import progress_bar

__all__ = ["CORRECT", "completions_path", "parse_spec", "result_json", "run", "sampling_temperature", "stop_ids"]

console = Console(stderr=True)
STOP_TOKENS = ("<|im_end|>", "<|endoftext|>")  # end of turn; end of document (a base model's natural stop)


def sampling_temperature(temperature: float, samples: int) -> float:
    """Greedy only makes sense for one sample: K > 1 at temperature 0 samples at 1.0."""
    return 1.0 if samples > 1 and temperature == 0 else temperature


def completions_path(out: str | os.PathLike) -> Path:
    """eval.json -> eval.completions.jsonl (next to it)."""
    p = Path(out)
    return p.with_name((p.stem if p.suffix == ".json" else p.name) + ".completions.jsonl")


def stop_ids(tokenizer, model=None) -> list[int]:
    """eos, the model's generation-config eos ids, and whichever of STOP_TOKENS the vocabulary has."""
    ids = {tokenizer.eos_token_id}
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids.update(configured if isinstance(configured, (list, tuple)) else [configured])
    vocab = tokenizer.get_vocab()
    ids.update(vocab[t] for t in STOP_TOKENS if t in vocab)
    return sorted(i for i in ids if isinstance(i, int))


def build_engine(cfg: EvalConfig, tokenizer):
    """`ENGINES[cfg.engine]` on cfg.model, with the options rl.py gives it (dtype, device, batch limit).
    The paged engine drafts (ngram, verified exactly: the same tokens) whenever no request waits for a
    batch slot, not only in the last few sequences as in RL: an eval's tail is many sequences running to
    max_new_tokens, mostly repeating themselves, and drafts cut its steps (benchmarks/eval_throughput.py)."""
    from posttrain.engine.registry import ENGINES
    from posttrain.core.hf import pick_device

    if cfg.engine not in ENGINES:
        raise ConfigError(f"engine: unknown engine {cfg.engine!r}; valid: {', '.join(sorted(ENGINES))}")
    options: dict[str, Any] = {"dtype": cfg.dtype, "device": pick_device()}
    if cfg.engine == "hf":
        options["max_batch_sequences"] = cfg.batch_size
    elif cfg.engine == "paged":
        options.update(max_num_seqs=cfg.batch_size, speculative_max_running=cfg.batch_size)
    else:  # remote / vllm take their own options only
        options = {}
    return ENGINES[cfg.engine](cfg.model, tokenizer, **{**options, **cfg.engine_options})


def with_verifiers(tasks: list, names: list[str] | None) -> list:
    """The tasks judged by `names` instead of their own verifiers (None: unchanged); an empty list or
    an unknown name is a one-line ConfigError."""
    if names is None:
        return tasks
    from dataclasses import replace

    from posttrain.verifiers import get_verifier

    if not names:
        raise ConfigError("verifiers: an empty list judges nothing; name at least one, or leave it unset")
    for name in names:
        get_verifier(name)
    return [replace(t, verifiers=tuple(names)) for t in tasks]


def tasks_per_call(batch_size: int, samples: int) -> int:
    """Tasks handed to the engine at once: enough to keep `batch_size` sequences busy 4 times over."""
    return max(1, 4 * batch_size // samples)


def check_context(engine, tokenizer, tasks) -> None:
    """A ConfigError naming the first task whose rendered prompt does not fit the engine's context
    (e.g. an 8k long-context probe on a 2k model), before anything is generated."""
    from posttrain.envs.single_turn import prompt_ids

    limit = getattr(engine, "max_model_len", None)
    if limit is None:
        return
    for task in tasks:
        n = len(prompt_ids(tokenizer, task))
        if n >= limit:
            raise ConfigError(f"tasks: {task.id}: its prompt has {n} tokens, the model's context is {limit} "
                              f"(lower the source's lengths, or use a longer-context model)")


def result_json(cfg: EvalConfig, result: EvalResult, temperature: float) -> dict[str, Any]:
    return {"model": cfg.model, "label": label_of(cfg), "suite": cfg.suite, "engine": cfg.engine,
            "samples": cfg.samples, "metrics": result.keys, "seed": cfg.seed, "temperature": temperature,
            "top_p": cfg.top_p, "max_tokens": cfg.max_new_tokens, "tasks": cfg.tasks, "verifiers": cfg.verifiers,
            "domains": result.domains, "overall": result.overall, "per_task": result.per_task()}


def label_of(cfg: EvalConfig) -> str:
    return cfg.label or Path(cfg.model).name


def _cell(row: dict[str, Any], key: str, bold: str = "") -> str:
    lo, hi = row[f"{key}_ci95"]
    return f"{bold}{row[key]:.3f}[/] [dim][{lo:.3f}, {hi:.3f}][/]" if bold else f"{row[key]:.3f} [dim][{lo:.3f}, {hi:.3f}][/]"


def print_table(result: dict[str, Any]) -> None:
    keys = result["metrics"]
    errors = result["overall"].get("verifier_errors", 0)
    table = Table(title=f"eval {result['model']} ({result['engine']}, K={result['samples']}, seed {result['seed']})")
    for col in ["domain", "n"] + [f"{k} [95% CI]" for k in keys] + ["mean tokens"] + (["verifier errors"] if errors else []):
        table.add_column(col, justify="left" if col == "domain" else "right")
    rows = [(name, row, "") for name, row in result["domains"].items()] + [("overall", result["overall"], "[bold]")]
    for name, row, bold in rows:
        table.add_row(f"{bold}{name}", str(row["n"]), *[_cell(row, k, bold) for k in keys], f"{row['mean_length']:.1f}",
                      *([str(row["verifier_errors"])] if errors else []))
    console.print(table)


def run(cfg: EvalConfig, table: bool = True) -> dict:
    """Evaluate cfg.model on cfg.tasks; writes cfg.out and the completions; returns the result dict
    (and prints its table unless `table` is False)."""
    from posttrain.domains.reasoning_gym.source import EVAL_SEED_START
    from posttrain.core.hf import load_tokenizer

    # everything the user can get wrong fails here, before a model is loaded
    tasks = load_spec(cfg.tasks, cfg.n_per_domain, cfg.seed, cfg.task_options)
    tasks = with_verifiers(tasks, cfg.verifiers)
    if cfg.seed < EVAL_SEED_START and any(t.metadata.get("source") == "reasoning_gym" for t in tasks):
        console.print(f"[yellow]warning[/]: eval seed {cfg.seed} < {EVAL_SEED_START}: tasks may overlap training data")
    temperature = sampling_temperature(cfg.temperature, cfg.samples)
    if temperature != cfg.temperature:
        console.print(f"[yellow]note[/]: samples={cfg.samples} at temperature 0 would all be equal; sampling at 1.0")
    tokenizer = load_tokenizer(cfg.model)
    engine = build_engine(cfg, tokenizer)
    check_context(engine, tokenizer, tasks)

    with progress_bar(len(tasks), f"eval {Path(cfg.model).name}", enabled=True) as bar:
        result = evaluate_tasks(
            engine, tokenizer, tasks, samples=cfg.samples, ks=cfg.ks(), temperature=temperature, top_p=cfg.top_p,
            max_tokens=cfg.max_new_tokens, stop_ids=stop_ids(tokenizer, getattr(engine, "model", None)),
            seed=cfg.seed, tasks_per_call=tasks_per_call(cfg.batch_size, cfg.samples), on_progress=bar.update)
    out = result_json(cfg, result, temperature)
    out.update(run_analyses(tasks, result.records, engine))
    lines = "".join(json.dumps(r.to_json()) + "\n" for r in result.records)
    write_text_atomic(completions_path(cfg.out), lines)
    write_text_atomic(Path(cfg.out), json.dumps(out, indent=2) + "\n")
    if table:
        print_table(out)
    if out["overall"].get("verifier_errors"):
        console.print(f"[yellow]warning[/]: {out['overall']['verifier_errors']} samples had verifier errors "
                      f"(counted wrong; see `errors` in {completions_path(cfg.out)})")
    console.print(f"[dim]wrote {cfg.out} and {completions_path(cfg.out)}[/]")
    return out
