"""`posttrain base`: the embedded default base model, built on a CPU in minutes.

    corpus    reasoning-gym questions of cfg.domains (training seeds, held-out questions skipped)
              as plain documents  "Question: ...\\nSolution: <steps>\\nAnswer: X"  — not chat:
              SFT teaches the chat format later. cfg.wrong_fraction of them carry a plausible
              wrong solution (a slipped step), so the base's skill is latent but unreliable.
    tokenizer local byte-level BPE on the corpus, with the ChatML template (build_tokenizer)
    model     a tiny Qwen2/Llama (make_tiny_model), causal-LM pretraining on packed contiguous
              chunks of cfg.seq_len tokens (documents joined by <|endoftext|>), AdamW, warmup +
              cosine, until cfg.max_steps or cfg.max_seconds, whichever comes first
    output    out_dir/model (HF layout), out_dir/metrics.jsonl, out_dir/config.yaml, out_dir/base.json

Cache: the weights depend only on the fields in `weights_key`; a finished base lives in
cache_dir/<key>/ and a later run with the same key copies it in seconds. An entry is built
under a temporary name and renamed when complete, so a crash never leaves a usable partial.
A build cut short by `max_seconds` depends on how busy the machine was: it is used but never
cached, so a later run on a quieter machine builds the full base.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import time
from pathlib import Path

import torch

from posttrain.config.base import save_config
from posttrain.config.pipeline import BaseConfig
from posttrain.core.errors import ConfigError, PosttrainError
from posttrain.core.fsio import replace_dir
from posttrain.domains.reasoning_gym.source import (EVAL_SEED_START, check_domain, make_tasks, score, split_count,
                                                    training_tasks)
from posttrain.engine.protocol import SamplingParams
from posttrain.engine.registry import ENGINES
from posttrain.tasks.worked import worked_steps, wrong_steps
from posttrain.telemetry.metrics import MetricsLogger
from posttrain.telemetry.progress import progress_bar
from posttrain.train.optim import clip_grad_norm, decayed, param_groups
from posttrain.train.threads import ThreadTuner
from posttrain.core.types import Task

CORPUS_VERSION = 2  # bump when the corpus format or the training loop changes the weights
BASE_SEED_OFFSET = 500_000  # the base corpus comes from seeds 500_000 + cfg.seed ... (SFT uses 0 ...)
NOT_WEIGHTS = {"out_dir", "cache_dir", "logging", "probe_tasks"}
LOG_EVERY = 10
INFO_FILE = "base.json"
PROBE_TOKENS = 64  # enough for the worked solution of a 3-term problem


# ---------------------------------------------------------------- corpus


def document(question: str, steps: str, answer: str) -> str:
    solution = f"Solution: {steps}\n" if steps else "Solution:\n"
    return f"Question: {question.strip()}\n{solution}Answer: {answer}"


def probe_prompt(question: str) -> str:
    """The raw-text prompt whose completion shows the base's skill."""
    return f"Question: {question.strip()}\nSolution:"


def build_corpus(cfg: BaseConfig) -> list[str]:
    """cfg.corpus_examples documents over cfg.domains, shuffled; a seeded share of them wrong.

    cfg.corpus_easy_fraction of each domain's documents use cfg.corpus_options[domain]
    (easier settings give the base something it can learn in minutes)."""
    seed = BASE_SEED_OFFSET + cfg.seed
    counts = split_count(cfg.corpus_examples, len(cfg.domains))
    if seed + max(counts) * 2 > EVAL_SEED_START:
        raise ConfigError(f"base: seed {cfg.seed} with {cfg.corpus_examples} examples reaches eval seeds")
    for name in cfg.corpus_options:  # catch typos; options of domains not in cfg.domains are unused
        check_domain(name)
    rng = random.Random(cfg.seed)
    tasks: list[Task] = []
    for domain, count in zip(cfg.domains, counts):
        options = cfg.corpus_options.get(domain)
        easy = round(count * cfg.corpus_easy_fraction) if options else 0
        if easy:
            tasks += training_tasks(domain, easy, seed, config=options)
        if count - easy:
            tasks += training_tasks(domain, count - easy, seed)
    rng.shuffle(tasks)
    return [_doc_for(task, rng, cfg.wrong_fraction) for task in tasks]


def _doc_for(task: Task, rng: random.Random, wrong_fraction: float) -> str:
    entry = task.reference
    if rng.random() < wrong_fraction:
        steps, answer = wrong_steps(task.domain, entry, rng)
    else:
        steps, answer = worked_steps(task.domain, entry), str(entry["answer"])
    return document(entry["question"], steps, answer)


def make_tokenizer(docs: list[str], vocab_size: int, split_digits: bool):
    """build_tokenizer on the corpus; with split_digits every digit becomes its own token."""
    from tokenizers import pre_tokenizers

    from posttrain.train.tokenizer import build_tokenizer

    tokenizer = build_tokenizer(docs, vocab_size)
    if split_digits:
        backend = tokenizer.backend_tokenizer
        backend.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), backend.pre_tokenizer]
        )
    return tokenizer


def pack(docs: list[str], tokenizer, seq_len: int) -> torch.Tensor:
    """Token ids of all documents joined by the pad/<|endoftext|> token, cut into [N, seq_len] rows."""
    sep = tokenizer.pad_token_id
    ids: list[int] = []
    for enc in tokenizer(docs, add_special_tokens=False)["input_ids"]:
        ids.extend(enc)
        ids.append(sep)
    rows = len(ids) // seq_len
    if rows == 0:
        raise ConfigError(f"base: the corpus has {len(ids)} tokens, fewer than seq_len={seq_len}")
    return torch.tensor(ids[: rows * seq_len], dtype=torch.long).view(rows, seq_len)


# ---------------------------------------------------------------- training


def lr_factor(progress: float, warmup: float = 0.05, min_ratio: float = 0.1) -> float:
    """Linear warmup over the first `warmup` of training, then cosine down to min_ratio."""
    progress = min(max(progress, 0.0), 1.0)
    if progress < warmup:
        return progress / warmup
    return decayed((progress - warmup) / (1.0 - warmup), "cosine", min_ratio)


def cpu_has_native_bf16() -> bool:
    """True when the CPU advertises bf16 arithmetic (avx512_bf16 or AMX), where bf16 autocast is ~1.7x faster."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def use_bf16(precision: str) -> bool:
    return precision == "bfloat16" or (precision == "auto" and cpu_has_native_bf16())


def pretrain(model, rows: torch.Tensor, cfg: BaseConfig, logger: MetricsLogger) -> dict:
    """Causal-LM training on random batches of packed rows; returns {steps, tokens_per_s, loss, seconds}."""
    gen = torch.Generator().manual_seed(cfg.seed)
    optim = torch.optim.AdamW(param_groups(model, weight_decay=0.1), lr=cfg.lr, betas=(0.9, 0.95))
    model.train()
    bf16 = use_bf16(cfg.precision)
    tuner = ThreadTuner()
    start = time.monotonic()
    order = torch.randperm(rows.shape[0], generator=gen)
    cursor, step, tokens, ema, value, lr = 0, 0, 0, None, float("nan"), cfg.lr
    try:
        with progress_bar(cfg.max_steps, "base", enabled=cfg.logging.progress) as bar:
            while step < cfg.max_steps and time.monotonic() - start < cfg.max_seconds:
                if cursor + cfg.batch_size > len(order):
                    order, cursor = torch.randperm(rows.shape[0], generator=gen), 0
                batch = rows[order[cursor : cursor + cfg.batch_size]]
                cursor += cfg.batch_size
                # the schedule follows whichever limit is nearer, so a time-limited run still anneals
                progress = max(step / cfg.max_steps, (time.monotonic() - start) / cfg.max_seconds)
                lr = cfg.lr * lr_factor(progress)
                for group in optim.param_groups:
                    group["lr"] = lr
                threads, step_start = tuner.start(step), time.monotonic()
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                    loss = model(input_ids=batch, labels=batch, use_cache=False).loss
                if not torch.isfinite(loss):
                    raise PosttrainError(f"base: non-finite loss at step {step}; try a lower lr (now {cfg.lr})")
                optim.zero_grad(set_to_none=True)
                loss.backward()
                clip_grad_norm(model, 1.0)
                optim.step()
                tuner.record(step, threads, time.monotonic() - step_start)
                step += 1
                tokens += batch.numel()
                value = loss.item()
                ema = value if ema is None else 0.9 * ema + 0.1 * value
                elapsed = time.monotonic() - start
                if step % LOG_EVERY == 0 or step == 1:
                    logger.log(step, {"loss": value, "lr": lr, "tokens_per_s": tokens / elapsed, "threads": threads})
                bar.update(1, loss=ema)
    finally:
        tuner.restore()
    elapsed = max(time.monotonic() - start, 1e-9)
    if step % LOG_EVERY != 0 and step != 1:
        logger.log(step, {"loss": value, "lr": lr, "tokens_per_s": tokens / elapsed})
    return {"steps": step, "tokens": tokens, "tokens_per_s": tokens / elapsed, "final_loss": ema, "seconds": elapsed,
            "stopped_by": "max_steps" if step >= cfg.max_steps else "max_seconds", "bf16": bf16,
            "threads": tuner.current}


# ---------------------------------------------------------------- probe


def probe(model, tokenizer, domains: list[str], n: int, seed: int = EVAL_SEED_START) -> dict[str, float]:
    """Accuracy of the greedy raw-text completion of `Question: ...\\nSolution:` on n held-out tasks
    per domain, generated by `ENGINES["hf"]` on `model` (which the engine puts in eval mode)."""
    engine = ENGINES["hf"](model, tokenizer)
    stops = tuple(t for t in (tokenizer.pad_token_id, tokenizer.eos_token_id) if t is not None)
    params = SamplingParams(temperature=0.0, max_tokens=PROBE_TOKENS, stop_token_ids=stops)
    out = {}
    for domain in domains:
        tasks = make_tasks(domain, n, seed)
        prompts = [tokenizer(probe_prompt(t.reference["question"]), add_special_tokens=False)["input_ids"]
                   for t in tasks]
        completions = engine.generate(prompts, [params] * len(prompts))
        texts = [tokenizer.decode(c.token_ids, skip_special_tokens=True).split("\nQuestion:")[0] for c in completions]
        out[domain] = sum(score(t, text) >= 1.0 for t, text in zip(tasks, texts)) / n
    return out


def _probe_with(threads: int, model, tokenizer, cfg: BaseConfig) -> dict[str, float]:
    """The probe on the thread count training found fastest."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return probe(model, tokenizer, cfg.domains, cfg.probe_tasks)
    finally:
        torch.set_num_threads(before)


# ---------------------------------------------------------------- cache + entry point


def weights_key(cfg: BaseConfig) -> str:
    fields = {k: v for k, v in cfg.model_dump(mode="json").items() if k not in NOT_WEIGHTS}
    fields["corpus_version"] = CORPUS_VERSION
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def _build(cfg: BaseConfig, entry: Path) -> dict:
    """Build the base into `entry` (a fresh temp dir); metrics go to cfg.out_dir as it trains."""
    from posttrain.train.tiny import make_tiny_model, save_model

    t0 = time.monotonic()
    docs = build_corpus(cfg)
    tokenizer = make_tokenizer(docs, cfg.vocab_size, cfg.split_digits)
    rows = pack(docs, tokenizer, cfg.seq_len)
    model = make_tiny_model(
        tokenizer, family=cfg.family, seed=cfg.seed, hidden_size=cfg.hidden_size, num_layers=cfg.num_layers,
        num_heads=cfg.num_heads, num_kv_heads=cfg.num_kv_heads, intermediate_size=cfg.intermediate_size,
        max_position_embeddings=cfg.max_position_embeddings,
    )
    out_dir = Path(cfg.out_dir)
    _set_aside(out_dir / "metrics.jsonl")
    logger = MetricsLogger(out_dir, tensorboard=cfg.logging.tensorboard, wandb=cfg.logging.wandb,
                           wandb_project=cfg.logging.wandb_project, config=cfg.model_dump(mode="json"))
    try:
        stats = pretrain(model, rows, cfg, logger)
    finally:
        logger.close()
    info = {
        "key": weights_key(cfg),
        "params": sum(p.numel() for p in model.parameters()),
        "corpus_documents": len(docs),
        "corpus_tokens": int(rows.numel()),
        **stats,
        "probe_accuracy": _probe_with(stats["threads"], model, tokenizer, cfg) if cfg.probe_tasks else {},
        "build_seconds": time.monotonic() - t0,
    }
    save_model(model, tokenizer, entry / "model")
    shutil.copy2(out_dir / "metrics.jsonl", entry / "metrics.jsonl")
    (entry / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")
    return info


def _complete(entry: Path) -> bool:
    return (entry / INFO_FILE).is_file() and (entry / "model" / "config.json").is_file()


def _set_aside(path: Path) -> None:
    """An earlier run's file in out_dir is kept as <name>.prev, never silently overwritten."""
    if path.exists():
        os.replace(path, path.with_name(path.name + ".prev"))


def _copy_dir(src: Path, dst: Path) -> None:
    """Replace dst by a copy of src; dst is only swapped in once the copy is complete."""
    tmp = dst.with_name(f".{dst.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp)
    replace_dir(tmp, dst)


def run(cfg: BaseConfig) -> Path:
    """Build (or reuse from the cache) the base; returns out_dir/model."""
    from rich.console import Console

    console = Console(stderr=True)
    for domain in cfg.domains:
        check_domain(domain)
    out_dir, cache = Path(cfg.out_dir), Path(cfg.cache_dir)
    key = weights_key(cfg)
    entry = cache / key
    if _complete(entry):
        console.print(f"[dim]base: reusing cached {entry}[/]")
        _publish(entry, out_dir, with_metrics=True)  # the curves of the run that built these weights
    else:
        tmp = cache / f".{key}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            info = _build(cfg, tmp)
            console.print(
                f"base: {info['params'] / 1e6:.2f}M params, {info['steps']} steps, {info['tokens_per_s']:.0f} "
                f"tokens/s, loss {info['final_loss']:.3f}, {info['seconds']:.0f}s; raw-text probe accuracy "
                f"{info['probe_accuracy']}"
            )
            if info["stopped_by"] == "max_seconds":
                # A time-capped build depends on how busy the machine was: use it, never cache it.
                console.print(
                    f"[yellow]warning[/]: max_seconds={cfg.max_seconds:g} stopped pretraining at step "
                    f"{info['steps']}/{cfg.max_steps} (a busy machine?); this base is used but not cached"
                )
                _publish(tmp, out_dir)
            else:
                if not _complete(entry):  # (another process may have finished the same key meanwhile)
                    replace_dir(tmp, entry)  # (over an incomplete entry left by an old crash)
                _publish(entry, out_dir)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    save_config(cfg, out_dir)
    return out_dir / "model"


def _publish(src: Path, out_dir: Path, with_metrics: bool = False) -> None:
    """Copy a built base (model, info and, from the cache, its training curves) into out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    _copy_dir(src / "model", out_dir / "model")
    shutil.copy2(src / INFO_FILE, out_dir / INFO_FILE)
    if with_metrics and (src / "metrics.jsonl").exists():
        _set_aside(out_dir / "metrics.jsonl")
        shutil.copy2(src / "metrics.jsonl", out_dir / "metrics.jsonl")
