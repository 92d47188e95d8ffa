"""Atomic checkpoints with exact resume.

    path = save_checkpoint(run_dir, step, model=m, tokenizer=tok, optimizer=opt, scheduler=sched,
                           state={"cursor": 123}, config=cfg, keep_last=2)
    ckpt = latest_checkpoint(run_dir)              # None when there is no complete one
    state = load_checkpoint(ckpt, model=m, optimizer=opt, scheduler=sched)   # state["step"], state["cursor"]

One directory per checkpoint, `RUN_DIR/checkpoints/step-00000010/`:

    model/          HF layout via save_pretrained (safetensors; a peft model saves its adapters), tokenizer
    optimizer.pt    optimizer.state_dict()            scheduler.pt   scheduler.state_dict()
    rng.pt          python random, numpy, torch CPU and CUDA generator states
    config.yaml     the resolved config               <name>/        one folder per `extra` callback
    meta.json       format, time, what was saved      state.json     {"step": N, **state} -- written last

It is written under `.tmp-step-00000010-<pid>`, every file and folder is fsynced, the folder is renamed
into place and the parent fsynced. Only `step-*` folders holding state.json count as checkpoints, so a
crash at any point never leaves one that resume would pick up half-written. Any failure (a full disk
included) removes the temporary folder, leaves earlier checkpoints untouched and raises CheckpointError.
"""

from __future__ import annotations

import json
import numbers
import os
import re
import shutil
import socket
import time
from pathlib import Path
from typing import Callable

import torch
import yaml

from posttrain.core.errors import CheckpointError, ConfigError, one_line
from posttrain.core.fsio import WriteRecorder, fsync_dir, fsync_tree, is_disk_full, remove_stale, replace_dir
from posttrain.core.hf import quiet_hf_progress
from posttrain.core.rng import rng_state, set_rng_state

FORMAT = 1
CHECKPOINTS = "checkpoints"
STATE_FILE = "state.json"
_STEP_DIR = re.compile(r"^step-(\d{8,})$")
_TMP_DIR = re.compile(r"^\.(?:tmp|old)-step-\d+-(?P<host>.+)-(?P<pid>\d+)$")
_RESERVED = {"model", "optimizer.pt", "scheduler.pt", "rng.pt", "config.yaml", "meta.json", STATE_FILE}


# ---------------------------------------------------------------- listing


def step_dir_name(step: int) -> str:
    return f"step-{step:08d}"


def list_checkpoints(run_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """Complete checkpoints under run_dir/checkpoints as (step, path), oldest first."""
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        m = _STEP_DIR.match(child.name)
        if m and child.is_dir() and (child / STATE_FILE).is_file():
            found.append((int(m.group(1)), child))
    return sorted(found)


def latest_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint (highest step), ignoring temporary and partial folders."""
    found = list_checkpoints(run_dir)
    return found[-1][1] if found else None


def resume_point(run_dir: str | os.PathLike, resume: bool) -> Path | None:
    """The checkpoint a run starts from: the newest one when resuming (None if there is none);
    a fresh run refuses a directory that already holds checkpoints rather than mixing two runs."""
    ckpt = latest_checkpoint(run_dir)
    if ckpt is not None and not resume:
        raise ConfigError(f"out_dir {run_dir} already holds checkpoints ({ckpt.name}): pass --resume or pick another out_dir")
    return ckpt


# ---------------------------------------------------------------- saving


def save_checkpoint(
    run_dir: str | os.PathLike,
    step: int,
    *,
    model,
    tokenizer=None,
    optimizer=None,
    scheduler=None,
    state: dict | None = None,
    config=None,
    keep_last: int = 2,
    extra: dict[str, Callable[[Path], None]] | None = None,
) -> Path:
    """Write run_dir/checkpoints/step-{step:08d}/ atomically and keep the newest keep_last.

    Each `extra` callback gets its own empty folder `<checkpoint>/<name>/` to write into
    (e.g. a replay buffer); read it back from `load_checkpoint(...)`'s path / name.
    """
    if not isinstance(step, numbers.Integral) or isinstance(step, bool) or step < 0:
        raise CheckpointError(f"checkpoint step must be a non-negative int, got {step!r}")
    step = int(step)  # e.g. a numpy or tensor-derived int
    if keep_last < 1:
        raise CheckpointError(f"keep_last must be >= 1, got {keep_last}")
    root = Path(run_dir) / CHECKPOINTS
    final = root / step_dir_name(step)
    state_json = _state_json(step, state)
    extra = dict(extra or {})
    for name in extra:
        if name in _RESERVED or not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or name.startswith("."):
            raise CheckpointError(f"extra checkpoint entry {name!r}: use a plain folder name not in {sorted(_RESERVED)}")
    tmp = root / f".tmp-{step_dir_name(step)}-{socket.gethostname()}-{os.getpid()}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        remove_stale(root, _TMP_DIR)
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        _write_all(tmp, step, model, tokenizer, optimizer, scheduler, config, extra, state_json)
        fsync_tree(tmp)
        replace_dir(tmp, final, fsync=True)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, CheckpointError):
            raise
        if not isinstance(e, Exception):  # KeyboardInterrupt etc.: clean up, then let it through
            raise
        if is_disk_full(e):
            raise CheckpointError(f"no space left on device while writing checkpoint step {step} to {root}") from e
        raise CheckpointError(f"cannot write checkpoint step {step} to {root}: {one_line(e)}") from e
    _rotate(root, keep_last, keep=final)
    return final


def _state_json(step: int, state: dict | None) -> str:
    payload = dict(state or {})
    if "step" in payload and payload["step"] != step:
        raise CheckpointError(f"checkpoint state has step={payload['step']!r} but is saved as step {step}")
    payload["step"] = step
    try:
        return json.dumps(payload, indent=1, sort_keys=True)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"checkpoint state for step {step} is not JSON-serializable: {one_line(e)}") from None


def _write_all(tmp: Path, step, model, tokenizer, optimizer, scheduler, config, extra, state_json: str) -> None:
    model = _unwrap(model)
    peft = _is_peft(model)
    with quiet_hf_progress():
        model.save_pretrained(tmp / "model")
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp / "model")
    if optimizer is not None:
        _torch_save(optimizer.state_dict(), tmp / "optimizer.pt")
    if scheduler is not None:
        _torch_save(scheduler.state_dict(), tmp / "scheduler.pt")
    _torch_save(rng_state(), tmp / "rng.pt")
    if config is not None:
        (tmp / "config.yaml").write_text(yaml.safe_dump(_config_dict(config), sort_keys=False))
    for name, fn in extra.items():
        (tmp / name).mkdir()
        fn(tmp / name)
    meta = {
        "format": FORMAT,
        "step": step,
        "time": time.time(),
        "peft": peft,
        "adapters": sorted(model.peft_config) if peft else [],
        "optimizer": optimizer is not None,
        "scheduler": scheduler is not None,
        "extra": sorted(extra),
        "torch": torch.__version__,
    }
    (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
    (tmp / STATE_FILE).write_text(state_json)  # last: its presence marks the checkpoint complete


def _rotate(root: Path, keep_last: int, keep: Path) -> None:
    """Delete complete checkpoints beyond the newest keep_last; `keep` (the new one) always stays."""
    others = [p for _, p in list_checkpoints(root.parent) if p != keep]
    doomed = others[: max(0, len(others) - (keep_last - 1))]
    for path in doomed:
        # drop the completion marker first, so a crash mid-delete leaves no "complete" half checkpoint
        try:
            (path / STATE_FILE).unlink()
        except OSError:
            continue
        shutil.rmtree(path, ignore_errors=True)
    if doomed:
        fsync_dir(root)


# ---------------------------------------------------------------- loading


def load_checkpoint(path: str | os.PathLike, *, model, optimizer=None, scheduler=None, restore_rng: bool = True) -> dict:
    """Load a checkpoint into `model` (in place), optimizer, scheduler and the RNGs; return its state (has "step").

    `model` must have the same architecture as the saved one: a plain HF model loads model/*.safetensors
    (tied weights may be absent from the file; any other missing or unexpected key is an error); a peft
    model (get_peft_model(...)) loads the saved adapter weights into its adapters, base weights untouched.
    """
    path = Path(path)
    state_file = path / STATE_FILE
    if not state_file.is_file():
        why = "does not exist" if not path.exists() else "is not a complete checkpoint (no state.json)"
        raise CheckpointError(f"checkpoint {path} {why}")
    try:
        state = json.loads(state_file.read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"checkpoint {path}: cannot read {STATE_FILE}: {one_line(e)}") from None
    model = _unwrap(model)
    if _is_peft(model):
        _load_peft(path / "model", model)
    else:
        _load_plain(path / "model", model)
    for what, obj in (("optimizer", optimizer), ("scheduler", scheduler)):
        if obj is None:
            continue
        saved = _torch_load(path / f"{what}.pt", path, what)
        try:
            obj.load_state_dict(saved)
        except (ValueError, KeyError, RuntimeError, TypeError) as e:
            raise CheckpointError(f"checkpoint {path}: saved {what} state does not fit this {what}: {one_line(e)}") from None
    if restore_rng:
        set_rng_state(_torch_load(path / "rng.pt", path, "RNG"))
    return state


def _load_plain(model_dir: Path, model) -> None:
    from safetensors.torch import load_file

    if (model_dir / "adapter_config.json").is_file():
        raise CheckpointError(f"checkpoint {model_dir.parent} holds LoRA adapters: load it into a peft model")
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"checkpoint {model_dir.parent} has no model weights (model/*.safetensors)")
    weights: dict[str, torch.Tensor] = {}
    for f in files:
        weights.update(load_file(str(f)))
    own = model.state_dict()
    if not set(weights) <= set(own):  # saved in a converted layout (e.g. fused experts): let HF map it back
        weights = _from_pretrained_state(model_dir, model)
    unexpected = sorted(set(weights) - set(own))
    missing = sorted(k for k in set(own) - set(weights) if not _tied_to_loaded(k, own, weights))
    if missing or unexpected:
        raise CheckpointError(
            f"checkpoint {model_dir.parent} does not match the model: "
            f"{len(missing)} missing keys {missing[:3]}, {len(unexpected)} unexpected keys {unexpected[:3]}"
        )
    try:
        model.load_state_dict(weights, strict=False)
    except RuntimeError as e:
        raise CheckpointError(f"checkpoint {model_dir.parent} does not match the model: {one_line(e)}") from None


def _from_pretrained_state(model_dir: Path, model) -> dict[str, torch.Tensor]:
    """Let transformers read a layout it converts on save (e.g. v5 fused MoE experts); demand an exact match."""
    where = model_dir.parent
    try:
        saved_type = json.loads((model_dir / "config.json").read_text()).get("model_type")
    except (OSError, ValueError) as e:
        raise CheckpointError(f"checkpoint {where}: cannot read model/config.json: {one_line(e)}") from None
    if saved_type != getattr(model.config, "model_type", None):
        raise CheckpointError(f"checkpoint {where} does not match the model: it holds a {saved_type!r} model, "
                              f"not {model.config.model_type!r}")
    try:
        with quiet_hf_progress():
            fresh, info = type(model).from_pretrained(model_dir, config=model.config, output_loading_info=True,
                                                      dtype=next(model.parameters()).dtype, device_map="cpu")
    except Exception as e:
        raise CheckpointError(f"checkpoint {where}: cannot read model weights: {one_line(e)}") from None
    bad = {k: sorted(v)[:3] for k, v in info.items() if k != "error_msgs" and v}
    if bad or info.get("error_msgs"):
        raise CheckpointError(f"checkpoint {where} does not match the model: {bad or info['error_msgs'][:1]}")
    return fresh.state_dict()


def _tied_to_loaded(key: str, own: dict[str, torch.Tensor], weights: dict) -> bool:
    """A key absent from the file is fine when its tensor is shared with one that is in the file."""
    t = own[key]
    if t.numel() == 0:
        return False
    return any(
        k in weights and k != key and v.data_ptr() == t.data_ptr() and v.shape == t.shape and v.stride() == t.stride()
        for k, v in own.items()
    )


def _load_peft(model_dir: Path, model) -> None:
    from peft import get_peft_model_state_dict, set_peft_model_state_dict
    from safetensors.torch import load_file

    if not (model_dir / "adapter_config.json").is_file() and (model_dir / "config.json").is_file():
        raise CheckpointError(f"checkpoint {model_dir.parent} holds a full model, not LoRA adapters: "
                              "load it into the plain model (before get_peft_model)")
    for name in model.peft_config:
        adir = model_dir if name == "default" else model_dir / name
        f = adir / "adapter_model.safetensors"
        if not f.is_file():
            raise CheckpointError(f"checkpoint {model_dir.parent} has no weights for LoRA adapter {name!r} ({f})")
        weights = load_file(str(f))
        expected = set(get_peft_model_state_dict(model, adapter_name=name))
        if set(weights) != expected:
            missing, unexpected = sorted(expected - set(weights)), sorted(set(weights) - expected)
            raise CheckpointError(
                f"checkpoint {model_dir.parent} adapter {name!r} does not match the model: "
                f"{len(missing)} missing keys {missing[:3]}, {len(unexpected)} unexpected keys {unexpected[:3]}"
            )
        try:
            set_peft_model_state_dict(model, weights, adapter_name=name)
        except RuntimeError as e:
            raise CheckpointError(f"checkpoint {model_dir.parent} adapter {name!r}: {one_line(e)}") from None


def _torch_load(f: Path, ckpt: Path, what: str):
    if not f.is_file():
        raise CheckpointError(f"checkpoint {ckpt} has no {what} state ({f.name}); it was saved without one")
    try:
        return torch.load(f, map_location="cpu", weights_only=True)
    except Exception:
        pass
    try:  # e.g. a scheduler holding a callable object: our own file, so a full unpickle is acceptable
        return torch.load(f, map_location="cpu", weights_only=False)
    except Exception as e:
        raise CheckpointError(f"checkpoint {ckpt}: cannot read {f.name}: {one_line(e)}") from None


# ---------------------------------------------------------------- small helpers


def _unwrap(model):
    """The model inside torch.compile / DDP wrappers."""
    while True:
        if hasattr(model, "_orig_mod"):
            model = model._orig_mod
        elif isinstance(model, torch.nn.parallel.DistributedDataParallel):
            model = model.module
        else:
            return model


def _is_peft(model) -> bool:
    try:
        from peft import PeftModel
    except ImportError:  # pragma: no cover - peft is a dependency
        return False
    return isinstance(model, PeftModel)


def _config_dict(config) -> dict:
    if hasattr(config, "model_dump"):
        return config.model_dump(mode="json")
    if isinstance(config, dict):
        return json.loads(json.dumps(config, default=str))
    raise CheckpointError(f"checkpoint config must be a pydantic model or a dict, got {type(config).__name__}")


def _torch_save(obj, f: Path) -> None:
    with open(f, "wb") as fh:
        rec = WriteRecorder(fh)
        try:
            torch.save(obj, rec)
        except Exception:
            if rec.error is not None:
                raise rec.error from None
            raise
