"""Training metrics to RUN_DIR/metrics.jsonl (always), TensorBoard (RUN_DIR/tb) and wandb (optional).

    with MetricsLogger(run_dir, config=cfg.model_dump(), resume_from_step=ckpt_step) as log:
        log.log(step, {"loss": 1.23, "lr": 3e-4})

metrics.jsonl holds one JSON object per line, `{"step": N, "time": unix_seconds, **metrics}`, flushed
after every call. Values are plain finite JSON: NaN and +-inf are written as null, tensors and numpy
scalars as numbers. `resume_from_step=k` first drops the lines with step > k (written after the
checkpoint the run resumes from), so a resumed run's file equals an uninterrupted run's.
`read_metrics(path)` reads such a file back, skipping a torn last line.
"""

from __future__ import annotations

import json
import logging
import math
import numbers
import os
import time
from pathlib import Path
from typing import Any, Mapping

from posttrain.core.errors import PosttrainError
from posttrain.core.fsio import write_text_atomic

log = logging.getLogger("posttrain")

METRICS_FILE = "metrics.jsonl"
_RESERVED = ("step", "time")


class MetricsLogger:
    def __init__(
        self,
        run_dir: str | os.PathLike,
        *,
        tensorboard: bool = True,
        wandb: bool = False,
        wandb_project: str = "posttrain",
        config: dict | None = None,
        resume_from_step: int | None = None,
    ):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / METRICS_FILE
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            if resume_from_step is not None:
                truncate_metrics(self.path, resume_from_step)
            self._file = open(self.path, "a", encoding="utf-8")
            if self._file.tell() > 0 and not _ends_with_newline(self.path):
                self._file.write("\n")  # a torn line from a crash must not swallow the next record
        except OSError as e:
            raise PosttrainError(f"cannot write metrics to {self.path}: {e.strerror or e}") from None
        self._tb = _open_tensorboard(self.run_dir / "tb", resume_from_step) if tensorboard else None
        self._wandb = _open_wandb(self.run_dir, wandb_project, config, resume_from_step) if wandb else None

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        if self._file is None:
            raise PosttrainError(f"MetricsLogger for {self.path} is closed")
        record: dict[str, Any] = {"step": int(step), "time": time.time()}
        for key, value in metrics.items():
            if key in _RESERVED:
                raise PosttrainError(f"metric name {key!r} is reserved in {self.path} (step {step})")
            record[str(key)] = _clean(key, value, step)
        self._file.write(json.dumps(record, allow_nan=False) + "\n")
        self._file.flush()
        numeric = {k: v for k, v in record.items() if k not in _RESERVED and _is_number(v)}
        if self._tb is not None:
            for key, value in numeric.items():
                self._tb.add_scalar(key, value, global_step=record["step"])
            self._tb.flush()
        if self._wandb is not None:
            try:
                self._wandb.log(numeric, step=record["step"])
            except Exception as e:  # a flaky wandb must never stop training
                log.warning("wandb log failed (%s); disabling wandb for this run", str(e).splitlines()[0] if str(e) else e)
                self._wandb = None

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._wandb is not None:
            try:
                self._wandb.finish()
            except Exception:
                pass
            self._wandb = None

    def __enter__(self) -> "MetricsLogger":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


# ---------------------------------------------------------------- file helpers


def read_metrics(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Records of a metrics.jsonl; lines that are not JSON objects (e.g. torn by a crash) are skipped."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            rec = _parse(line)
            if rec is not None:
                out.append(rec)
    return out


def truncate_metrics(path: str | os.PathLike, last_step: int) -> int:
    """Keep only records with step <= last_step (and no torn lines); rewrite atomically. Returns lines kept."""
    path = Path(path)
    if not path.exists():
        return 0
    kept = [line if line.endswith("\n") else line + "\n" for line in _lines(path)
            if (rec := _parse(line)) is not None and rec["step"] <= last_step]
    write_text_atomic(path, "".join(kept), fsync=True)
    return len(kept)


def _lines(path: Path) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return f.readlines()


def _parse(line: str) -> dict | None:
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    if not isinstance(rec, dict) or not isinstance(rec.get("step"), int):
        return None
    return rec


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _clean(key: str, value: Any, step: int) -> Any:
    """A metric value as finite JSON: numbers (NaN/inf -> None), bools, strings, None."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if hasattr(value, "item"):  # a one-element tensor or numpy scalar
        try:
            value = value.item()
        except (ValueError, RuntimeError):
            raise PosttrainError(f"metric {key!r} at step {step}: not a single number (shape {tuple(value.shape)})") from None
        if isinstance(value, (bool, int)):
            return value
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise PosttrainError(f"metric {key!r} at step {step}: {type(value).__name__} is not a number") from None
    return f if math.isfinite(f) else None


# ---------------------------------------------------------------- backends


def _open_tensorboard(tb_dir: Path, resume_from_step: int | None):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except Exception as e:  # tensorboard missing or broken: metrics.jsonl still has everything
        log.warning("TensorBoard disabled: %s", str(e).splitlines()[0] if str(e) else type(e).__name__)
        return None
    purge = resume_from_step + 1 if resume_from_step is not None else None
    return SummaryWriter(log_dir=str(tb_dir), purge_step=purge)


def _open_wandb(run_dir: Path, project: str, config: dict | None, resume_from_step: int | None):
    try:
        import wandb
    except ImportError:
        log.warning("wandb is enabled but not installed (pip install wandb); logging to metrics.jsonl and TensorBoard only")
        return None
    id_file = run_dir / "wandb_id.txt"
    try:
        run_id = id_file.read_text().strip() if id_file.is_file() else wandb.util.generate_id()
        id_file.write_text(run_id)
        run = wandb.init(project=project, dir=str(run_dir), config=config or {}, id=run_id,
                         resume="allow", name=run_dir.name)
    except Exception as e:
        log.warning("wandb disabled: %s", str(e).splitlines()[0] if str(e) else type(e).__name__)
        return None
    return run
