"""Chat data for SFT: JSONL files, HF datasets, and records built elsewhere.

    data = load_chat_examples("data.jsonl")                 # {"messages": [...]} per line
    data = load_chat_examples("hf:HuggingFaceH4/no_robots:train")   # datasets.load_dataset
    data = load_chat_examples("hf:/path/saved_with_save_to_disk")    # datasets.load_from_disk
    data = from_records(records, "gym:chain_sum:4000")      # task-built examples (recipes/sft.py
                                                             # `load_sft_source`: gym:, tasks:)

Every example is validated: `messages` must be a list of {role, content} string pairs
with at least one assistant turn. A record may instead be already tokenized,
`{"input_ids": [...], "loss_mask": [...]}` (equal lengths, mask 0/1 with at least one 1: the
tokens trained on; e.g. tasks/episode_sft.py's oracle episodes, rendered as RL renders them):
it becomes a `TokenRecord` and is packed as it is, never re-rendered. A bad line raises `DataError` naming `file:line`;
with `skip_bad_lines=True` bad lines are counted instead (`ChatData.bad_lines`,
`ChatData.bad_line_numbers` holds the first few).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from posttrain.core.errors import DataError
from posttrain.core.fsio import bad_lines

Messages = list[dict[str, str]]
SHOWN_BAD_LINES = 5  # how many bad line numbers a report names


@dataclass(frozen=True)
class TokenRecord:
    """An example given as tokens: `loss_mask[t]` = 1 where token t is trained on (predicted)."""

    input_ids: tuple[int, ...]
    loss_mask: tuple[int, ...]


@dataclass
class ChatData:
    examples: list[Messages | TokenRecord]  # one chat (list of {role, content}) or token record per example
    source: str
    bad_lines: int = 0
    bad_line_numbers: list[int] = field(default_factory=list)  # the first SHOWN_BAD_LINES of them

    def bad_lines_summary(self) -> str:
        """One line for the user, e.g. '3 bad lines skipped in data.jsonl (lines 2, 7, 9)'."""
        if not self.bad_lines:
            return ""
        shown = ", ".join(str(n) for n in self.bad_line_numbers)
        more = ", ..." if self.bad_lines > len(self.bad_line_numbers) else ""
        return f"{self.bad_lines} bad lines skipped in {self.source} (lines {shown}{more})"


def check_tokens(record: dict) -> TokenRecord:
    """The validated token record `{"input_ids", "loss_mask"}`; raises ValueError saying what is wrong."""
    ids, mask = record.get("input_ids"), record.get("loss_mask")
    if not isinstance(ids, list) or not ids or not all(type(t) is int and t >= 0 for t in ids):
        raise ValueError("'input_ids' must be a non-empty list of token ids (ints >= 0)")
    if not isinstance(mask, list) or len(mask) != len(ids):
        raise ValueError(f"'loss_mask' must be a list as long as 'input_ids' ({len(ids)})")
    if any(m not in (0, 1) or isinstance(m, float) for m in mask):
        raise ValueError("'loss_mask' must hold only 0 and 1")
    if not any(mask[1:]):
        raise ValueError("'loss_mask' marks no token to train on (after the first)")
    return TokenRecord(tuple(ids), tuple(int(m) for m in mask))


def check_record(record: Any) -> Messages | TokenRecord:
    """A record's validated example: a token record when it has 'input_ids', else its messages."""
    if isinstance(record, dict) and "input_ids" in record:
        return check_tokens(record)
    return check_messages(record)


def check_messages(record: Any) -> Messages:
    """The validated `messages` of one record; raises ValueError saying what is wrong."""
    if not isinstance(record, dict):
        raise ValueError(f"expected a JSON object with 'messages', got {type(record).__name__}")
    messages = record.get("messages")
    if messages is None:
        raise ValueError("no 'messages' field")
    if not isinstance(messages, list) or not messages:
        raise ValueError("'messages' must be a non-empty list")
    out: Messages = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise ValueError(f"messages[{i}] is not an object")
        role, content = msg.get("role"), msg.get("content")
        if not isinstance(role, str) or not role:
            raise ValueError(f"messages[{i}] has no string 'role'")
        if not isinstance(content, str):
            raise ValueError(f"messages[{i}] has no string 'content'")
        out.append({"role": role, "content": content})
    if not any(m["role"] == "assistant" for m in out):
        raise ValueError("'messages' has no assistant turn")
    return out


def _collect(records: Iterable[tuple[int, Any]], where: str, skip_bad_lines: bool, unit: str) -> ChatData:
    """Validate (number, record-or-exception) pairs; `where` prefixes errors, e.g. 'data.jsonl:'."""
    data = ChatData(examples=[], source=where)
    problems: list[str] = []  # every bad line, found in one pass
    for number, record in records:
        try:
            if isinstance(record, Exception):
                raise record
            data.examples.append(check_record(record))
        except ValueError as e:
            problems.append(f"{where}{unit}{number}: {e}")
            data.bad_lines += 1
            if len(data.bad_line_numbers) < SHOWN_BAD_LINES:
                data.bad_line_numbers.append(number)
    if problems and not skip_bad_lines:
        raise bad_lines(problems)
    return data


def _jsonl_records(path: Path) -> Iterable[tuple[int, Any]]:
    with path.open("r", encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as e:
                yield number, ValueError(f"not valid JSON ({e.msg}, column {e.colno})")


def load_jsonl(path: str, skip_bad_lines: bool = False) -> ChatData:
    p = Path(path)
    if not p.is_file():
        raise DataError(f"{path}: data file not found")
    data = _collect(_jsonl_records(p), f"{path}:", skip_bad_lines, unit="")
    data.source = path
    if not data.examples:
        raise DataError(f"{path}: no valid examples")
    return data


def _split_hf_spec(spec: str) -> tuple[str, str | None]:
    """'NAME[:SPLIT]' -> (NAME, SPLIT); a NAME that is an existing path is taken whole."""
    if Path(spec).exists():
        return spec, None
    name, sep, split = spec.rpartition(":")
    if sep and name and split and "/" not in split:
        return name, split
    return spec, None


def open_hf_dataset(spec: str):
    """The dataset of 'NAME_OR_DIR[:SPLIT]': a `save_to_disk` directory (a DatasetDict's SPLIT,
    default train) or a hub dataset where downloads work; one-line DataError otherwise."""
    import datasets

    name, split = _split_hf_spec(spec)
    try:
        if Path(name).is_dir():
            ds = datasets.load_from_disk(name)
            if isinstance(ds, datasets.DatasetDict):
                split = split or ("train" if "train" in ds else next(iter(ds)))
                if split not in ds:
                    raise DataError(f"hf:{spec}: no split {split!r} (has {', '.join(ds)})")
                ds = ds[split]
        else:
            ds = datasets.load_dataset(name, split=split or "train")
    except DataError:
        raise
    except Exception as e:  # datasets raises many types; the user needs the first line
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise DataError(f"hf:{spec}: cannot load dataset ({first})") from None
    return ds


def load_hf(spec: str, skip_bad_lines: bool = False) -> ChatData:
    ds = open_hf_dataset(spec)
    if "messages" not in ds.column_names:
        raise DataError(f"hf:{spec}: dataset has no 'messages' column (columns: {', '.join(ds.column_names)})")
    rows = ((i, {"messages": m}) for i, m in enumerate(ds["messages"]))
    data = _collect(rows, f"hf:{spec}", skip_bad_lines, unit=" row ")
    data.source = f"hf:{spec}"
    if not data.examples:
        raise DataError(f"hf:{spec}: no valid examples")
    return data


def from_records(records: Iterable[dict], source: str) -> ChatData:
    """Chat examples from records built elsewhere (`{"messages": [...]}` each, e.g. tasks/sft_data.py, or
    token records `{"input_ids", "loss_mask"}`, e.g. tasks/episode_sft.py),
    checked like a file's lines; `source` names them in errors."""
    data = _collect(enumerate(records, start=1), source, skip_bad_lines=False, unit=" example ")
    data.source = source
    return data


def load_chat_examples(source: str, skip_bad_lines: bool = False) -> ChatData:
    """Load chat examples from a JSONL path or `hf:NAME[:SPLIT]` (task-built examples: `from_records`)."""
    if source.startswith("hf:"):
        return load_hf(source[3:], skip_bad_lines)
    return load_jsonl(source, skip_bad_lines)


def split_eval(examples: list, fraction: float, seed: int) -> tuple[list, list]:
    """Hold out round(fraction * n) examples (at least 1 when fraction > 0) chosen by `seed`."""
    if fraction <= 0 or len(examples) < 2:
        return list(examples), []
    n_eval = min(len(examples) - 1, max(1, round(fraction * len(examples))))
    order = list(range(len(examples)))
    random.Random(seed).shuffle(order)
    held = set(order[:n_eval])
    train = [ex for i, ex in enumerate(examples) if i not in held]
    evals = [examples[i] for i in sorted(held)]
    return train, evals
