"""Errors that are the user's to fix. The CLI prints them as one line, never a traceback."""


class PosttrainError(Exception):
    """Base of all errors with a one-line message meant for the user."""


class ConfigError(PosttrainError, ValueError):
    """A config that cannot be used; the message names the key."""


class DataError(PosttrainError, ValueError):
    """A dataset that cannot be read; the message names the file and line."""


class ModelLoadError(PosttrainError):
    """A model or tokenizer path that cannot be loaded."""


class CheckpointError(PosttrainError):
    """A checkpoint that cannot be written or read; earlier checkpoints stay intact."""


class TrainingError(PosttrainError):
    """Training cannot go on (e.g. repeated non-finite losses)."""


class WeightSyncError(PosttrainError):
    """A weight transfer that cannot be used (cut off, corrupted, missing); the engine keeps its old
    weights. The message names the version and the tensor or file (engine/weight_sync.py)."""


class GateError(PosttrainError):
    """A regression gate failed (the message names the gate, the model and the numbers)."""


def gate_failure(rows: list[dict]) -> GateError:
    """One GateError naming every failed gate row (eval/compare.py `gate_row` dicts)."""
    parts = [f"{r['name']}: {r['model']} {r['value']:.3f} vs {r['baseline']} {r['baseline_value']:.3f} "
             f"(drop {r['drop']:.3f} > {r['max_drop']:g})" for r in rows]
    return GateError("gate failed: " + "; ".join(parts))


def one_line(error: BaseException | str, limit: int | None = 300) -> str:
    """An error (or any text) as one line for a message: `Type: text` with white space folded,
    cut to `limit` characters ("..." marks the cut; None: no cut). Every module's messages use this."""
    if isinstance(error, BaseException):
        text = " ".join(str(error).split())
        text = f"{type(error).__name__}: {text}" if text else type(error).__name__
    else:
        text = " ".join(str(error).split())
    if limit is not None and len(text) > limit:
        text = text[: limit - 3] + "..."
    return text
