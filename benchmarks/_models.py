"""Models the benchmarks need, built on a fresh clone and cached (a helper, not a benchmark).

    from _models import sft_model, random_model

    path = sft_model(args.model, args.config)   # --model if given, else the config's SFT model
    model, name = random_model(args.config)     # a random model of the config's base shape
    options = task_options(args.config, path, domains)  # the config's task_options (warns on a mismatch)

`sft_model`: the pipeline config's (default configs/quickstart-tiny.yaml) `base` and `sft` stages, run
with `posttrain.recipes.pipeline` into CACHE/sft-<key>/ (base/, sft/final/, config.yaml), where
the key hashes everything that decides the weights (the base and SFT sections and the top-level
task_options; output paths left out). The base runs without its `max_seconds` cap, so the
weights depend on the config alone, never on how busy the machine was while it built (the base
recipe also caches the base itself by its own key). A directory is built under a temporary name
and renamed when complete, so an interrupted build never counts; the next call reuses it, and a
process that asks while another builds the same key waits for it (a lock file) instead of
building it twice.
On 2 idle cores with bf16 about 5 minutes (the quickstart's base ~160 s, SFT ~170 s), once; the
time it took is saved in the entry's done.json.

`smollm2_model(say)`: SmolLM2-135M-Instruct converted once (`posttrain models get`) into
.cache/posttrain/models/smollm2-135m-instruct, built under a temporary name and renamed.

`random_model`: weights do not change a step's cost, so speed benchmarks that need only the
shape build it at random in seconds (same family, widths, layers and vocabulary as the base).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "posttrain" / "bench"
DEFAULT_CONFIG = "configs/quickstart-tiny.yaml"
UNCAPPED_SECONDS = 24 * 3600.0  # the base's time cap, lifted: its weights follow max_steps only
DONE = "done.json"

if str(ROOT) not in sys.path:  # benchmarks run as scripts from any directory
    sys.path.insert(0, str(ROOT))


def _config_path(config: str | os.PathLike | None) -> Path:
    path = Path(config or DEFAULT_CONFIG)
    return path if path.is_absolute() or path.exists() else ROOT / path


def _pipeline(config: str | os.PathLike | None):
    """The config's base + SFT stages, base uncapped, sharing the repo's base cache."""
    from posttrain.config.base import load_config
    from posttrain.config.pipeline import PipelineConfig

    cfg = load_config(PipelineConfig, _config_path(config))
    cfg.stages = ["base", "sft"]
    cfg.base.max_seconds = UNCAPPED_SECONDS
    if not Path(cfg.base.cache_dir).is_absolute():
        cfg.base.cache_dir = str(ROOT / cfg.base.cache_dir)
    return cfg


def _key(cfg) -> str:
    """What decides the SFT weights: the base and SFT sections and task_options, without paths."""
    base = cfg.base.model_dump(mode="json", exclude={"out_dir", "cache_dir", "logging", "probe_tasks"})
    sft = cfg.sft.model_dump(mode="json", exclude={"out_dir", "logging"})
    sft["model"].pop("path", None)  # set by the pipeline to the base it builds
    blob = json.dumps({"base": base, "sft": sft, "task_options": cfg.task_options}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _say(msg: str) -> None:
    print(f"[models] {msg}", file=sys.stderr, flush=True)


def sft_model(override: str | None = None, config: str | os.PathLike | None = None) -> str:
    """`override` when given (it must hold an HF model), else the config's cached SFT model (built if missing)."""
    if override:
        if not (Path(override) / "config.json").is_file():
            sys.exit(f"error: no model at {override!r} (--model: an HF model directory with config.json)")
        return override
    cfg = _pipeline(config)
    entry = CACHE / f"sft-{_key(cfg)}"
    final = entry / "sft" / "final"
    if not _complete(entry):
        CACHE.mkdir(parents=True, exist_ok=True)
        with open(CACHE / f"{entry.name}.lock", "w") as lock:  # one build per key; the others wait for it
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                _say(f"waiting for another process building {entry.relative_to(ROOT)}")
                fcntl.flock(lock, fcntl.LOCK_EX)
            if not _complete(entry):
                _build(cfg, entry, config)
                return str(final)
    _say(f"reusing {final.relative_to(ROOT)}")
    return str(final)


def _complete(entry: Path) -> bool:
    return (entry / DONE).is_file() and (entry / "sft" / "final" / "config.json").is_file()


def _build(cfg, entry: Path, config) -> None:
    """Run the base + SFT stages into a temporary directory, then rename it to `entry`."""
    from posttrain.recipes import pipeline

    for stale in CACHE.glob(f".{entry.name}.tmp-*"):  # left by builds that died (their pid is gone)
        if not _alive(stale.name.rpartition("-")[2]):
            shutil.rmtree(stale, ignore_errors=True)
    tmp = CACHE / f".{entry.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    cfg.run_dir = str(tmp)
    _say(f"building the SFT model of {_config_path(config).name} (base + SFT, once; a few minutes on idle "
         f"cores) into {entry.relative_to(ROOT)}")
    started = time.perf_counter()
    try:
        pipeline.run(cfg)
        seconds = time.perf_counter() - started
        (tmp / DONE).write_text(json.dumps({"seconds": round(seconds, 1), "config": str(config or DEFAULT_CONFIG),
                                            "load_average": os.getloadavg()}) + "\n")
        if not _complete(entry):  # (a process without the lock, e.g. an older copy of this file, may have won)
            shutil.rmtree(entry, ignore_errors=True)  # an incomplete entry left by an old crash
            os.replace(tmp, entry)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _say(f"built in {seconds:.0f} s: {(entry / 'sft' / 'final').relative_to(ROOT)}")


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def random_model(config: str | os.PathLike | None = None, seed: int = 0):
    """(model, description): a randomly initialised model of the config's base shape, in memory."""
    from posttrain.train.tiny import make_tiny_model

    b = _pipeline(config).base
    vocab = type("Vocab", (), {"__len__": lambda self: b.vocab_size, "pad_token_id": 0, "eos_token_id": 2})()
    model = make_tiny_model(vocab, family=b.family, seed=seed, hidden_size=b.hidden_size, num_layers=b.num_layers,
                            num_heads=b.num_heads, num_kv_heads=b.num_kv_heads, intermediate_size=b.intermediate_size,
                            max_position_embeddings=b.max_position_embeddings)
    return model, (f"random {b.family} of {_config_path(config).name}'s base shape (hidden {b.hidden_size}, "
                   f"{b.num_layers} layers, vocab {b.vocab_size})")


def task_options(config: str | os.PathLike | None, model: str, domains) -> dict[str, dict]:
    """Per-domain reasoning-gym options from the config's top-level task_options; warns when the model's own run
    config (MODEL/../../config.yaml, as the pipeline writes it) trained on other options."""
    from posttrain.config.base import read_yaml
    from posttrain.core.errors import ConfigError

    path = _config_path(config)
    options = read_yaml(path).get("task_options") or {}
    missing = [d for d in domains if not isinstance(options.get(d), dict)]
    if missing:
        raise ConfigError(f"{path}: task_options has no options for {missing[0]!r} (need {', '.join(domains)})")
    run_config = Path(model).parents[1] / "config.yaml"
    if run_config.is_file():
        trained = read_yaml(run_config).get("task_options") or {}
        if any(trained.get(d) != options[d] for d in domains):
            _say(f"warning: {model} comes from a run with task_options {({d: trained.get(d) for d in domains})} "
                 f"({run_config}), not {path.name}'s {({d: options[d] for d in domains})}: pass --config "
                 f"{run_config} to match it")
    return {d: dict(options[d]) for d in domains}


SMOLLM2 = "smollm2-135m-instruct"
SMOLLM2_DIR = ROOT / ".cache" / "posttrain" / "models" / SMOLLM2


def smollm2_model(say=print) -> str:
    """SMOLLM2_DIR, converted with `posttrain models get` into a temporary directory and renamed when missing."""
    if (SMOLLM2_DIR / "config.json").is_file():
        return str(SMOLLM2_DIR)
    from posttrain.models.registry import get_model

    SMOLLM2_DIR.parent.mkdir(parents=True, exist_ok=True)
    tmp = SMOLLM2_DIR.with_name(f".{SMOLLM2}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    say(f"getting {SMOLLM2} (once) into {SMOLLM2_DIR.relative_to(ROOT)}")
    try:
        get_model(SMOLLM2, tmp, say=say)
        if not (SMOLLM2_DIR / "config.json").is_file():  # another process may have finished first
            shutil.rmtree(SMOLLM2_DIR, ignore_errors=True)
            os.replace(tmp, SMOLLM2_DIR)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return str(SMOLLM2_DIR)
