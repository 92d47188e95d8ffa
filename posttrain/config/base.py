"""The config loader: YAML + dotted overrides -> a typed pydantic tree, with one-line errors.

    cfg = load_config(SFTConfig, "configs/x.yaml", ["train.lr=1e-4", "model.path=/models/m"])

Every config section derives from `Strict` (unknown keys are errors). Unknown keys and wrong types
are rejected with `ConfigError`, whose message is one line naming the key and what was expected.
`save_config` writes the resolved tree into a run directory so that every run and checkpoint
carries the exact config it ran with. The sections themselves live beside this module: common.py
(shared sections), sft.py, pref.py, rl.py, sched.py, eval.py, cluster.py, pipeline.py.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Iterable, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from posttrain.core.errors import ConfigError
from posttrain.core.fsio import write_text_atomic


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def one_of(value: str, names: Iterable[str], what: str) -> str:
    """`value` if it is one of the registry's `names`; else a one-line error listing them."""
    known = list(names)
    if value not in known:
        raise ValueError(f"unknown {what} {value!r}; known: {', '.join(known)}")
    return value


C = TypeVar("C", bound=BaseModel)


_FLOAT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def _scalar(raw: str) -> Any:
    """A YAML scalar, except that 1e-4 is a float (YAML 1.1 reads it as a string)."""
    if _FLOAT.match(raw.strip()):
        number = float(raw)
        return int(raw) if re.fullmatch(r"[+-]?\d+", raw.strip()) else number
    try:
        return yaml.safe_load(raw) if raw != "" else ""
    except yaml.YAMLError:
        return raw


def parse_overrides(overrides: list[str]) -> dict[str, Any]:
    """["a.b=1", "c=x"] -> {"a": {"b": 1}, "c": "x"}; values are parsed as YAML scalars."""
    tree: dict[str, Any] = {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key or any(not part for part in key.split(".")):
            raise ConfigError(f"override {item!r}: expected KEY=VALUE with a dotted key, e.g. train.lr=1e-4")
        value = _scalar(raw)
        node = tree
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"override {item!r}: {part!r} was already given a value")
            node = child
        node[parts[-1]] = value
    return tree


def deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def read_yaml(path: str | os.PathLike) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: config file not found")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{p}:{where}: malformed YAML: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping of config keys at the top, got {type(data).__name__}")
    return data


def _describe(error: dict[str, Any]) -> str:
    key = ".".join(str(part) for part in error["loc"]) or "<root>"
    kind = error["type"]
    if kind == "extra_forbidden":
        return f"unknown key {key!r}"
    if kind == "missing":
        return f"missing required key {key!r}"
    if kind == "value_error":  # a model validator's own message says what is wrong
        message = error["msg"].removeprefix("Value error, ")
        return message if key == "<root>" else f"{key}: {message}"
    got = error.get("input")
    shown = repr(got) if not isinstance(got, dict) else "a mapping"
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return f"{key}: {error['msg'].rstrip('.')} (got {shown})"


def validate(model: type[C], data: dict[str, Any], source: str = "config") -> C:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        errors = e.errors()
        first = _describe(errors[0])
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ConfigError(f"{source}: {first}{more}") from None


def load_config(model: type[C], path: str | os.PathLike | None, overrides: list[str] | None = None) -> C:
    data = read_yaml(path) if path is not None else {}
    data = deep_merge(data, parse_overrides(overrides or []))
    return validate(model, data, source=str(path) if path is not None else "config")


def config_text(cfg: BaseModel) -> str:
    """The resolved config as the YAML text `save_config` writes."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)


def save_config(cfg: BaseModel, run_dir: str | os.PathLike, name: str = "config.yaml") -> Path:
    """Write the resolved config into the run directory (atomically)."""
    return write_text_atomic(Path(run_dir) / name, config_text(cfg))
