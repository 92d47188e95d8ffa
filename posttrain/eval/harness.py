"""`posttrain eval`: held-out reasoning-gym tasks -> pass@1 / pass@K per domain, as JSON.

    run(EvalConfig(model="runs/sft/final", tasks="basic_arithmetic:100,chain_sum", samples=4))

Tasks come from seeds starting at `cfg.seed` (1_000_000 by default; training data stays
below that and skips held-out questions). Each prompt is rendered with the model's chat
template (add_generation_prompt), completions stop at <|im_end|> (or <|endoftext|>). A sample counts as
correct when the dataset's `score_answer` gives it full marks (1.0); pass@k uses the
unbiased estimator. Writes:

    cfg.out                        {"model", "samples", "seed", "domains": {NAME: {"n", "pass@1",
                                    "pass@K", "mean_length"}}, "overall": {"pass@1", "pass@K"}}
    <out stem>.completions.jsonl   one line per sample: id, domain, completion, extracted, score
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from posttrain.config import EvalConfig
from posttrain.errors import ConfigError, ModelLoadError
from posttrain.eval.generate import Generation, generate
from posttrain.eval.passk import mean_pass_at_k
from posttrain.fsio import write_text_atomic
from posttrain.tasks.reasoning_gym import EVAL_SEED_START, check_domain, extract_answer, make_tasks, score
from posttrain.telemetry.progress import progress_bar
from posttrain.types import Task

console = Console(stderr=True)
CORRECT = 1.0 - 1e-9  # a sample is correct when its score reaches full marks


def parse_spec(spec: str, default_n: int) -> list[tuple[str, int]]:
    """"a:10,b" -> [("a", 10), ("b", default_n)]; unknown domains and bad counts raise ConfigError."""
    out: list[tuple[str, int]] = []
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, count = item.partition(":")
        name = name.strip()
        if sep:
            try:
                n = int(count)
            except ValueError:
                raise ConfigError(f"tasks: {item!r}: expected NAME:N with an integer N") from None
            if n <= 0:
                raise ConfigError(f"tasks: {item!r}: N must be > 0")
        else:
            n = default_n
        check_domain(name)
        if any(name == seen for seen, _ in out):
            raise ConfigError(f"tasks: domain {name!r} is listed twice")
        out.append((name, n))
    if not out:
        raise ConfigError(f"tasks: {spec!r} names no domain; expected NAME[:N],NAME[:N],...")
    return out


def sampling_temperature(temperature: float, samples: int) -> float:
    """Greedy only makes sense for one sample: K > 1 at temperature 0 samples at 1.0."""
    return 1.0 if samples > 1 and temperature == 0 else temperature


def summarize(
    tasks: list[Task], scores: list[list[float]], lengths: list[list[int]], samples: int
) -> dict[str, dict[str, float]]:
    """Per-domain {"n", "pass@1", "pass@K", "mean_length"} from per-sample scores (K per task)."""
    by_domain: dict[str, list[int]] = {}
    for i, task in enumerate(tasks):
        by_domain.setdefault(task.domain, []).append(i)
    out: dict[str, dict[str, float]] = {}
    for domain, idx in by_domain.items():
        counts = [(len(scores[i]), sum(s >= CORRECT for s in scores[i])) for i in idx]
        row: dict[str, float] = {"n": len(idx), "pass@1": mean_pass_at_k(counts, 1)}
        if samples > 1:
            row[f"pass@{samples}"] = mean_pass_at_k(counts, samples)
        all_lengths = [n for i in idx for n in lengths[i]]
        row["mean_length"] = sum(all_lengths) / len(all_lengths) if all_lengths else 0.0
        out[domain] = row
    return out


def overall(domains: dict[str, dict[str, float]], samples: int) -> dict[str, float]:
    keys = ["pass@1"] + ([f"pass@{samples}"] if samples > 1 else [])
    return {k: sum(d[k] for d in domains.values()) / len(domains) for k in keys} if domains else {}


def score_completions(tasks: list[Task], completions: list[list[str]]) -> list[list[float]]:
    return [[score(task, text) for text in texts] for task, texts in zip(tasks, completions)]


def completions_path(out: str | os.PathLike) -> Path:
    """eval.json -> eval.completions.jsonl (next to it)."""
    p = Path(out)
    return p.with_name((p.stem if p.suffix == ".json" else p.name) + ".completions.jsonl")


def _render_prompts(tokenizer, tasks: list[Task], model_path: str) -> list[str]:
    if not getattr(tokenizer, "chat_template", None):
        raise ModelLoadError(f"model {model_path!r}: its tokenizer has no chat template (eval renders prompts as chat)")
    return [tokenizer.apply_chat_template(list(t.prompt), tokenize=False, add_generation_prompt=True) for t in tasks]


STOP_TOKENS = ("<|im_end|>", "<|endoftext|>")  # end of turn; end of document (a base model's natural stop)


def stop_ids(tokenizer, model=None) -> list[int]:
    """eos, the model's generation-config eos ids, and whichever of STOP_TOKENS the vocabulary has."""
    ids = {tokenizer.eos_token_id}
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids.update(configured if isinstance(configured, (list, tuple)) else [configured])
    vocab = tokenizer.get_vocab()
    ids.update(vocab[t] for t in STOP_TOKENS if t in vocab)
    return sorted(i for i in ids if isinstance(i, int))


def print_table(result: dict[str, Any]) -> None:
    k = result["samples"]
    keys = ["pass@1"] + ([f"pass@{k}"] if k > 1 else [])
    table = Table(title=f"eval {result['model']} (K={k}, seed {result['seed']})")
    table.add_column("domain")
    table.add_column("n", justify="right")
    for key in keys:
        table.add_column(key, justify="right")
    table.add_column("mean tokens", justify="right")
    for name, row in result["domains"].items():
        table.add_row(name, str(row["n"]), *[f"{row[key]:.3f}" for key in keys], f"{row['mean_length']:.1f}")
    table.add_row("[bold]overall", "", *[f"[bold]{result['overall'][key]:.3f}" for key in keys], "")
    console.print(table)


def run(cfg: EvalConfig) -> dict:
    """Evaluate cfg.model on cfg.tasks; writes cfg.out and the completions; returns the result dict."""
    from posttrain.train.model import load_model_and_tokenizer

    spec = parse_spec(cfg.tasks, cfg.n_per_domain)
    if cfg.seed < EVAL_SEED_START:
        console.print(f"[yellow]warning[/]: eval seed {cfg.seed} < {EVAL_SEED_START}: tasks may overlap training data")
    temperature = sampling_temperature(cfg.temperature, cfg.samples)
    if temperature != cfg.temperature:
        console.print(f"[yellow]note[/]: samples={cfg.samples} at temperature 0 would all be equal; sampling at 1.0")
    tasks = [task for name, n in spec for task in make_tasks(name, n, cfg.seed, config=cfg.task_options.get(name))]
    model, tokenizer = load_model_and_tokenizer(cfg.model)
    prompts = _render_prompts(tokenizer, tasks, cfg.model)

    with progress_bar(len(tasks), f"eval {Path(cfg.model).name}", enabled=True) as bar:
        gens: list[list[Generation]] = generate(
            model,
            tokenizer,
            prompts,
            max_new_tokens=cfg.max_new_tokens,
            num_samples=cfg.samples,
            temperature=temperature,
            top_p=cfg.top_p,
            sequences_per_batch=cfg.batch_size,
            eos_token_ids=stop_ids(tokenizer, model),
            seed=cfg.seed,
            on_batch=bar.update,
        )
    completions = [[g.text for g in row] for row in gens]
    scores = score_completions(tasks, completions)
    domains = summarize(tasks, scores, [[g.num_tokens for g in row] for row in gens], cfg.samples)
    result = {
        "model": cfg.model,
        "samples": cfg.samples,
        "seed": cfg.seed,
        "domains": domains,
        "overall": overall(domains, cfg.samples),
    }
    lines = [
        json.dumps(
            {
                "id": task.id,
                "domain": task.domain,
                "sample": j,
                "completion": g.text,
                "extracted": extract_answer(g.text),
                "score": s,
                "finish_reason": g.finish_reason,
            }
        )
        for task, row, row_scores in zip(tasks, gens, scores)
        for j, (g, s) in enumerate(zip(row, row_scores))
    ]
    write_text_atomic(completions_path(cfg.out), "\n".join(lines) + "\n")
    write_text_atomic(Path(cfg.out), json.dumps(result, indent=2) + "\n")
    print_table(result)
    console.print(f"[dim]wrote {cfg.out} and {completions_path(cfg.out)}[/]")
    return result
