"""Preference data for RM / DPO / KTO: TRL's record formats -> token-exact pairs.

    data = load_pairs("pairs.jsonl", tok, max_prompt_len=512, max_len=1024)
    data = load_pairs("hf:/path/saved_with_save_to_disk:train", tok)
    data = load_pairs(spec, tok, records=preference_records(spec, seed=0))   # spec "pref:KIND:N", tasks/preferences.py
    data.pairs[0].prompt_ids, data.pairs[0].chosen_ids     # prompt tokenized once, shared by both
    data.bad_lines_summary(), data.template_issues          # report these to the user

Records (one JSON object a line; extra columns are ignored, an optional number `margin` is kept):
- text:            {"prompt": str, "chosen": str, "rejected": str}   (eos appended to completions)
- conversational:  {"prompt": [messages], "chosen": [assistant message(s)], "rejected": [...]}
- implicit prompt: {"chosen": [conversation], "rejected": [conversation]}: the prompt is their
                   longest shared prefix of messages, after which both go on with an assistant turn;
- unpaired (KTO):  {"prompt", "completion", "label": bool} as text or messages -> `TokenExample`.

Messages are rendered with the chat template: prompt_ids = the prompt with
add_generation_prompt=True, a completion = the ids of the whole conversation after the prompt,
so `prompt_ids + chosen_ids` is exactly the template's tokenization of prompt + chosen (it ends
with the template's end of turn and whatever the template writes after it). Where the template
breaks that, the cause is reported in `template_issues` (a default system prompt the record did
not have, <think> blocks stripped from assistant turns, tokens merging across the prompt/answer
boundary: then the completion is tokenized on its own after prompt_ids) rather than hidden.

A bad record raises `DataError("file.jsonl:7: chosen and rejected are identical")`; with
`skip_bad_lines=True` bad records are listed in `PairData.bad_lines` instead (a source with no
good record is still an error).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from posttrain.core.errors import DataError
from posttrain.core.fsio import bad_lines
from posttrain.train.data import SHOWN_BAD_LINES, _jsonl_records, open_hf_dataset

Messages = list[dict[str, str]]


@dataclass(frozen=True)
class TokenPair:
    prompt_ids: tuple[int, ...]  # the prompt, tokenized once (shared by chosen and rejected)
    chosen_ids: tuple[int, ...]  # the chosen completion, to be appended to prompt_ids
    rejected_ids: tuple[int, ...]
    margin: float | None = None  # optional `margin` column (reward-model training)
    where: str = ""  # "file.jsonl:12"


@dataclass(frozen=True)
class TokenExample:  # unpaired (KTO)
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    desirable: bool
    where: str = ""


@dataclass
class PairData:
    pairs: list[TokenPair] = field(default_factory=list)
    examples: list[TokenExample] = field(default_factory=list)  # unpaired records
    bad_lines: list[str] = field(default_factory=list)  # "file:line: reason" (with skip_bad_lines)
    template_issues: list[str] = field(default_factory=list)  # one line per kind: what, how often, first where
    source: str = ""

    def bad_lines_summary(self) -> str | None:
        """One line for the user, e.g. '2 bad lines skipped in d.jsonl: d.jsonl:3: 'chosen' is empty; ...'."""
        if not self.bad_lines:
            return None
        shown = "; ".join(self.bad_lines[:SHOWN_BAD_LINES])
        more = "; ..." if len(self.bad_lines) > SHOWN_BAD_LINES else ""
        return f"{len(self.bad_lines)} bad lines skipped in {self.source or 'the data'}: {shown}{more}"


# ---------------------------------------------------------------- records


def _records(spec: str) -> Iterable[tuple[str, Any]]:
    """(where, record-or-ValueError) of a JSONL path or `hf:PATH_OR_NAME[:SPLIT]`."""
    if spec.startswith("hf:"):
        yield from _hf_records(spec[3:])
        return
    path = Path(spec)
    if not path.is_file():
        raise DataError(f"{spec}: data file not found")
    for number, record in _jsonl_records(path):
        yield f"{spec}:{number}", record


def _hf_records(spec: str) -> Iterable[tuple[str, Any]]:
    ds = open_hf_dataset(spec)
    for i, row in enumerate(ds):
        yield f"hf:{spec} row {i}", row


# ---------------------------------------------------------------- validation


def _messages(value: list, name: str) -> Messages:
    out = []
    for i, msg in enumerate(value):
        if not isinstance(msg, dict):
            raise ValueError(f"'{name}'[{i}] is not a message object")
        role, content = msg.get("role"), msg.get("content")
        if not isinstance(role, str) or not role:
            raise ValueError(f"'{name}'[{i}] has no string 'role'")
        if not isinstance(content, str):
            raise ValueError(f"'{name}'[{i}] has no string 'content'")
        out.append({"role": role, "content": content})
    return out


def _field(record: dict, name: str, conversational: bool | None) -> str | Messages:
    """The text or messages of `name`; `conversational` (None: either) is what the other fields are."""
    if name not in record or record[name] is None:
        raise ValueError(f"missing field '{name}'")
    value = record[name]
    if isinstance(value, str) and conversational is not True:
        return value
    if isinstance(value, list) and conversational is not False:
        return _messages(value, name)
    want = {None: "a string or a list of messages", True: "a list of messages (as 'prompt' is)",
            False: "a string (as 'prompt' is)"}[conversational]
    raise ValueError(f"'{name}' must be {want}, got {type(value).__name__}")


def _check_completion(value: str | Messages, name: str) -> None:
    if isinstance(value, str):
        if not value.strip():
            raise ValueError(f"'{name}' is empty")
        return
    if not value or not any(m["content"].strip() for m in value):
        raise ValueError(f"'{name}' is empty")
    if value[0]["role"] != "assistant":
        raise ValueError(f"'{name}' must start with an assistant message, got role '{value[0]['role']}'")


def _check_prompt(prompt: str | Messages) -> None:
    if isinstance(prompt, str) and not prompt.strip() or isinstance(prompt, list) and not prompt:
        raise ValueError("'prompt' is empty")


def _margin(record: dict) -> float | None:
    value = record.get("margin")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"'margin' must be a finite number, got {value!r}")
    return float(value)


def _implicit_prompt(chosen: Messages, rejected: Messages) -> tuple[Messages, Messages, Messages]:
    n = 0
    while n < min(len(chosen), len(rejected)) and chosen[n] == rejected[n]:
        n += 1
    if chosen == rejected:
        raise ValueError("chosen and rejected are identical")
    if n == 0:
        raise ValueError("implicit prompt: 'chosen' and 'rejected' share no leading messages")
    for name, rest in (("chosen", chosen[n:]), ("rejected", rejected[n:])):
        if rest and rest[0]["role"] != "assistant":
            raise ValueError(f"implicit prompt: after the shared prefix '{name}' goes on with role "
                             f"'{rest[0]['role']}', not an assistant turn")
    return chosen[:n], chosen[n:], rejected[n:]


def _parse(record: Any) -> tuple[str, Any, list, float | None, bool | None]:
    """('paired'|'unpaired', prompt, [completions], margin, label) of a valid record; else ValueError."""
    if not isinstance(record, dict):
        raise ValueError(f"expected a JSON object, got {type(record).__name__}")
    if "completion" in record or "label" in record and "chosen" not in record and "rejected" not in record:
        prompt = _field(record, "prompt", None)
        completion = _field(record, "completion", isinstance(prompt, list))
        _check_completion(completion, "completion")
        _check_prompt(prompt)
        label = record.get("label")
        if not isinstance(label, bool):
            raise ValueError("missing field 'label'" if label is None
                             else f"'label' must be true or false, got {label!r}")
        return "unpaired", prompt, [completion], None, label
    if "chosen" not in record and "rejected" not in record:
        raise ValueError("missing field 'chosen' (expected prompt/chosen/rejected or prompt/completion/label)")
    if record.get("prompt") is None:  # implicit prompt: two conversations
        if isinstance(record.get("chosen"), str) or isinstance(record.get("rejected"), str):
            raise ValueError("missing field 'prompt' (only conversations can share an implicit prompt)")
        chosen, rejected = _field(record, "chosen", True), _field(record, "rejected", True)
        prompt, chosen, rejected = _implicit_prompt(chosen, rejected)
    else:
        prompt = _field(record, "prompt", None)
        chosen = _field(record, "chosen", isinstance(prompt, list))
        rejected = _field(record, "rejected", isinstance(prompt, list))
    _check_prompt(prompt)
    _check_completion(chosen, "chosen")
    _check_completion(rejected, "rejected")
    if chosen == rejected:
        raise ValueError("chosen and rejected are identical")
    return "paired", prompt, [chosen, rejected], _margin(record), None


# ---------------------------------------------------------------- tokenization


ISSUES = {
    "system": "the chat template adds a system prompt the records do not have (e.g. a default "
              "'You are a helpful assistant'); it is part of every prompt",
    "think": "the chat template strips <think>...</think> blocks from assistant turns; the completions are "
             "trained without their reasoning",
    "merge": "tokens merge across the prompt/answer boundary (the whole text does not tokenize to the prompt's "
             "ids plus more); those completions are tokenized on their own after the prompt ids",
    "prefix": "the chat template renders the prompt differently inside the whole conversation than with "
              "add_generation_prompt=True; those completions are the conversation's text after what the two "
              "renderings share",
}


class _Tokenizer:
    """Tokenizes prompts and completions; counts template issues as (count, first where)."""

    def __init__(self, tokenizer):
        self.tok = tokenizer
        self.issues: dict[str, list] = {}

    def issue(self, kind: str, where: str) -> None:
        entry = self.issues.setdefault(kind, [0, where, None])  # records, first where, last where
        if entry[2] != where:
            entry[0], entry[2] = entry[0] + 1, where

    def ids(self, text: str, special: bool = False) -> list[int]:
        return list(self.tok(text, add_special_tokens=special)["input_ids"])

    def render(self, messages: Messages, generation_prompt: bool = False) -> str:
        return self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)

    def prompt(self, prompt: str | Messages, where: str) -> tuple[list[int], str]:
        if isinstance(prompt, str):
            return self.ids(prompt, special=True), prompt
        text = self.render(prompt, generation_prompt=True)
        if not any(m["role"] == "system" for m in prompt) and "system" in text \
                and not any("system" in m["content"] for m in prompt):
            self.issue("system", where)
        return self.ids(text), text

    def completion(self, prompt, prompt_ids: list[int], prompt_text: str, completion, where: str) -> list[int]:
        if isinstance(prompt, str):
            full_ids = self.ids(prompt + completion, special=True)
            if full_ids[:len(prompt_ids)] == prompt_ids:
                out = full_ids[len(prompt_ids):]
            else:
                self.issue("merge", where)
                out = self.ids(completion)
            eos = self.tok.eos_token_id
            if eos is not None and (not out or out[-1] != eos):
                out.append(eos)
            return out
        full_text = self.render(prompt + completion)
        thinks = [m["content"] for m in completion if m["role"] == "assistant" and "<think>" in m["content"]]
        if any(_think_block(c) not in full_text for c in thinks):
            self.issue("think", where)
        if not full_text.startswith(prompt_text):
            self.issue("prefix", where)
            base = self.render(prompt)
            if not full_text.startswith(base):
                raise ValueError("the chat template renders the prompt differently inside the whole conversation")
            rest, generation = full_text[len(base):], prompt_text[len(base):]
            return self.ids(rest[len(os.path.commonprefix([rest, generation])):])
        full_ids = self.ids(full_text)
        if full_ids[:len(prompt_ids)] == prompt_ids:
            return full_ids[len(prompt_ids):]
        self.issue("merge", where)
        return self.ids(full_text[len(prompt_text):])

    def lines(self) -> list[str]:
        return [f"{ISSUES[kind]} ({n} records, first at {first})" for kind, (n, first, _) in self.issues.items()]


def _think_block(content: str) -> str:
    start = content.index("<think>")
    end = content.find("</think>", start)
    return content[start:] if end < 0 else content[start:end + len("</think>")]


def tokenize_pairs(records: Iterable[tuple[str, Any]], tokenizer, *, max_prompt_len: int, max_len: int,
                   skip_bad_lines: bool = False) -> PairData:
    """Check and tokenize (where, record) pairs; a record may be a ValueError (a malformed line)."""
    data = PairData()
    tk = _Tokenizer(tokenizer)
    for where, record in records:
        try:
            if isinstance(record, Exception):
                raise record
            kind, prompt, completions, margin, label = _parse(record)
            if not isinstance(prompt, str) and not getattr(tokenizer, "chat_template", None):
                raise ValueError("messages need a chat template and the tokenizer has none")
            prompt_ids, prompt_text = tk.prompt(prompt, where)
            if len(prompt_ids) > max_prompt_len:
                raise ValueError(f"prompt is {len(prompt_ids)} tokens, over max_prompt_len {max_prompt_len}")
            names = ["completion"] if kind == "unpaired" else ["chosen", "rejected"]
            outs = []
            for name, completion in zip(names, completions):
                ids = tk.completion(prompt, prompt_ids, prompt_text, completion, where)
                if len(prompt_ids) + len(ids) > max_len:
                    raise ValueError(f"prompt + {name} is {len(prompt_ids) + len(ids)} tokens, over max_len {max_len}")
                outs.append(tuple(ids))
            if kind == "unpaired":
                data.examples.append(TokenExample(tuple(prompt_ids), outs[0], label, where))
            elif outs[0] == outs[1]:
                raise ValueError("chosen and rejected are identical after tokenization")
            else:
                data.pairs.append(TokenPair(tuple(prompt_ids), outs[0], outs[1], margin, where))
        except ValueError as e:
            data.bad_lines.append(f"{where}: {e}")
    if data.bad_lines and not skip_bad_lines:  # every bad line, found in one pass
        raise bad_lines(data.bad_lines)
    data.template_issues = tk.lines()
    return data


def load_pairs(spec: str, tokenizer, *, max_prompt_len: int = 512, max_len: int = 1024,
               skip_bad_lines: bool = False, records: Iterable[tuple[str, Any]] | None = None) -> PairData:
    """Load and tokenize the preference data of `spec` (a JSONL path or `hf:...`), or the
    (where, record) pairs given as `records` (built elsewhere, e.g. tasks/preferences.py
    `preference_records` for `pref:...`; `spec` then only names them)."""
    data = tokenize_pairs(_records(spec) if records is None else records, tokenizer, max_prompt_len=max_prompt_len, max_len=max_len,
                          skip_bad_lines=skip_bad_lines)
    data.source = spec
    if not data.pairs and not data.examples:
        first = f" ({len(data.bad_lines)} bad lines, first {data.bad_lines[0]})" if data.bad_lines else ""
        raise DataError(f"{spec}: no valid records{first}")
    return data
