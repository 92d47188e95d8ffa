"""BFCL v4 data as plain records: questions joined with possible answers, tool schemas, the held-out split.

    entries = load_category("simple_python")         # [{"id", "question", "function", "answer"}, ...]
    split_of("simple_python_7")                      # "train" | "test" (25% test, by a hash of the id)
    tools = [tool_schema(f) for f in entries[0]["function"]]   # OpenAI-style {"type": "function", ...}
    docs = multi_turn_docs(["GorillaFileSystem"])    # BFCL's function docs of the multi-turn API classes
    files = class_sources(["GorillaFileSystem"])     # {"gorilla_file_system.py": text, ...} for the sandbox

The data is the `bfcl-eval` wheel's, fetched into the cache by `posttrain tasks fetch bfcl` (fetch.py;
an installed `bfcl_eval` package is used when there is no fetched copy, found with
`importlib.util.find_spec`, which does not execute it); only its JSON files and, for the
multi-turn classes, its source files *as text* are read here. Nothing under `bfcl_eval` is ever
imported in our process (the classes run inside the sandbox, domains/bfcl/runner.py).

Decisions:
- The split hashes the BFCL id alone (sha256 of "bfcl-split:<id>", 1 in 4 is "test"), so it never
  changes with the seed, the order of the file or the other tasks picked: RL trains on "train" and
  evaluates on "test" with no overlap.
- Tool names: BFCL's OSS function-calling handlers replace "." by "_" in names ("math.factorial" ->
  "math_factorial"), because tool-call APIs and pythonic calls take identifiers only; the schemas
  here do the same (`dots=False` keeps them) and the checker expects the converted names.
- Types: BFCL's "dict" -> "object", "float" -> "number", "tuple" -> "array", "any" -> no type
  (any JSON value), other JSON-Schema keys (enum, default, items, properties, required) kept.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from posttrain.core.errors import ConfigError, DataError
from posttrain.domains.bfcl.fetch import FETCH_COMMAND, REQUIREMENT, fetched_dir

TEST_FRACTION_OF = 4  # one id in 4 is held out
SPLITS = ("train", "test", "all")
# the multi-turn API classes: their function docs and source files in the wheel (BFCL's own mapping)
CLASS_FILES = {
    "GorillaFileSystem": "gorilla_file_system",
    "MathAPI": "math_api",
    "MessageAPI": "message_api",
    "TwitterAPI": "posting_api",
    "TicketAPI": "ticket_api",
    "TradingBot": "trading_bot",
    "TravelAPI": "travel_booking",
    "VehicleControlAPI": "vehicle_control",
}
STATELESS_CLASSES = ("MathAPI",)  # BFCL loads no scenario into these
SOURCE_PACKAGE = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code."
TYPE_MAP = {"dict": "object", "float": "number", "tuple": "array", "integer": "integer", "string": "string",
            "boolean": "boolean", "array": "array", "number": "number", "object": "object"}


def _data_dir() -> Path | None:
    """The fetched copy in the cache, else an installed `bfcl_eval` package, else None."""
    fetched = fetched_dir()
    if fetched is not None:
        return fetched
    spec = importlib.util.find_spec("bfcl_eval")
    return Path(list(spec.submodule_search_locations)[0]) if spec and spec.submodule_search_locations else None


def bfcl_dir() -> Path:
    """BFCL's `bfcl_eval` data directory: the fetched copy in the cache (`posttrain tasks fetch bfcl`,
    fetch.py), else an installed `bfcl_eval` package; a ConfigError naming the fetch command when neither is there."""
    found = _data_dir()
    if found is None:
        raise ConfigError(f"bfcl: BFCL v4's data is not here: run `{FETCH_COMMAND}` (downloads {REQUIREMENT} "
                          "into the cache once, then works offline)")
    return found


def missing() -> str | None:
    """None when BFCL's data is here, else the command that fetches it (`posttrain tasks list`)."""
    return None if _data_dir() is not None else FETCH_COMMAND


def _read_json_lines(path: Path) -> list[dict]:
    if not path.is_file():
        raise ConfigError(f"bfcl: {path} is missing from the installed bfcl-eval wheel")
    out = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
            if not isinstance(record, dict) or not isinstance(record.get("id", ""), str):
                raise DataError(f"{path}:{lineno}: expected a JSON object with a string 'id'")
            out.append(record)
    return out


@lru_cache(maxsize=None)
def _load(category: str) -> tuple[dict, ...]:
    data = bfcl_dir() / "data"
    questions = _read_json_lines(data / f"BFCL_v4_{category}.json")
    answer_file = data / "possible_answer" / f"BFCL_v4_{category}.json"
    answers = {a["id"]: a.get("ground_truth") for a in _read_json_lines(answer_file)} if answer_file.is_file() else {}
    out = []
    for q in questions:
        for key in ("id", "question"):
            if key not in q:
                raise DataError(f"{data / f'BFCL_v4_{category}.json'}: entry {q.get('id', '?')!r} has no {key!r}")
        if answers and q["id"] not in answers:
            raise DataError(f"{answer_file}: no possible answer for {q['id']!r}")
        out.append({**q, "answer": answers.get(q["id"])})
    return tuple(out)


def load_category(category: str) -> list[dict]:
    """Every entry of BFCL v4 `category`, each with its possible answer ("answer"; None where the
    category has none, e.g. irrelevance), in file order. Fresh copies: callers may keep them."""
    return copy.deepcopy(list(_load(category)))


def split_of(bfcl_id: str) -> str:
    digest = hashlib.sha256(f"bfcl-split:{bfcl_id}".encode()).digest()
    return "test" if int.from_bytes(digest[:8], "big") % TEST_FRACTION_OF == 0 else "train"


def pick(entries: list[dict], n: int | None, seed: int, split: str, where: str) -> list[dict]:
    """The entries of `split`, then `n` of them drawn by `seed` (file order kept); n=None: all."""
    import random

    if split not in SPLITS:
        raise ConfigError(f"{where}: option split must be one of {', '.join(SPLITS)}, got {split!r}")
    chosen = [e for e in entries if split == "all" or split_of(e["id"]) == split]
    if n is None or n >= len(chosen):
        if n is not None and n > len(chosen):
            raise ConfigError(f"{where}: {n} tasks asked, the {split} split has only {len(chosen)}")
        return chosen
    keep = set(random.Random(f"{where}:{seed}").sample(range(len(chosen)), n))
    return [e for i, e in enumerate(chosen) if i in keep]


def tool_name(name: str, dots: bool = False) -> str:
    """The name a model sees and calls: "." -> "_" as BFCL's function-calling handlers do (dots=True keeps it)."""
    return name if dots else name.replace(".", "_")


def json_schema(param: Any) -> Any:
    """One BFCL parameter description as JSON Schema (recursively: items, properties)."""
    if not isinstance(param, dict):
        return param
    out = {}
    for key, value in param.items():
        if key == "type":
            if value != "any":
                out["type"] = TYPE_MAP.get(value, value)
        elif key == "properties" and isinstance(value, dict):
            out["properties"] = {k: json_schema(v) for k, v in value.items()}
        elif key == "items":
            out["items"] = json_schema(value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def tool_schema(function: dict, dots: bool = False) -> dict:
    """A BFCL function doc as an OpenAI-style tool: {"type": "function", "function": {name, description, parameters}}."""
    params = json_schema(function.get("parameters") or {"type": "dict", "properties": {}})
    params["type"] = "object"
    return {"type": "function", "function": {"name": tool_name(function["name"], dots),
                                             "description": function.get("description", ""),
                                             "parameters": params}}


def _check_classes(classes: list[str]) -> None:
    unknown = [c for c in classes if c not in CLASS_FILES]
    if unknown:
        raise DataError(f"bfcl: unknown API class {unknown[0]!r} (known: {', '.join(CLASS_FILES)})")


def multi_turn_docs(classes: list[str]) -> list[dict]:
    """BFCL's function docs of every function of `classes`, in class order (as BFCL gives them)."""
    _check_classes(classes)
    docs = []
    for name in classes:
        docs.extend(_read_json_lines(bfcl_dir() / "data" / "multi_turn_func_doc" / f"{CLASS_FILES[name]}.json"))
    return docs


@lru_cache(maxsize=None)
def _source(module: str) -> str:
    path = bfcl_dir() / "eval_checker" / "multi_turn_eval" / "func_source_code" / f"{module}.py"
    if not path.is_file():
        raise ConfigError(f"bfcl: {path} is missing from the installed bfcl-eval wheel")
    # the classes import their sibling `long_context` by its package path; in the sandbox they sit side by side
    return path.read_text(encoding="utf-8").replace(SOURCE_PACKAGE, "")


def class_sources(classes: list[str]) -> dict[str, str]:
    """{file name: source text} of `classes` and what they import from their own package."""
    _check_classes(classes)
    files = {f"{CLASS_FILES[c]}.py": _source(CLASS_FILES[c]) for c in classes}
    if any("from long_context import" in text for text in files.values()):
        files["long_context.py"] = _source("long_context")
    return files


def mpmath_files() -> dict[str, str]:
    """The pure-Python `mpmath` package as {relative path: text} (MathAPI imports it; the sandbox's
    system Python has no third-party packages). A ConfigError when it is not installed here."""
    spec = importlib.util.find_spec("mpmath")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("bfcl: MathAPI needs the `mpmath` package (pip install mpmath==1.3.0)")
    return _package_files(list(spec.submodule_search_locations)[0])


@lru_cache(maxsize=None)
def _package_files(root: str) -> dict[str, str]:
    base = Path(root)
    return {f"mpmath/{p.relative_to(base)}": p.read_text(encoding="utf-8")
            for p in sorted(base.rglob("*.py")) if "tests" not in p.relative_to(base).parts}
