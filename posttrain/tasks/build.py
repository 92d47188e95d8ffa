"""Build a validated task set from a user's data: `posttrain tasks build`.

    posttrain tasks build qa.csv --kind qa --verifier numeric --out tasks/qa
    posttrain tasks build code.jsonl --kind code --out tasks/code
    posttrain eval --model M --tasks tasks/qa/eval.jsonl        # or RL: tasks: [{name: qa, path: tasks/qa/train.jsonl}]

    report = build_tasks("qa.csv", "tasks/qa", BuildOptions(kind="qa", verifier="numeric"))

INPUT is a `.jsonl` file (one object a line) or a `.csv` file with a header row. Columns:
- `--kind qa`: `question`, `answer`; verifier `--verifier` (default `exact`; any registered one,
  e.g. `numeric`, `math`). The prompt is the question plus the line asking for `Answer: <answer>`.
- `--kind code`: `prompt`, `solution`, and either `tests` (Python assert statements as text, or in
  JSONL a list of them; other statements in the text, e.g. imports, become the tests' setup) or a
  HumanEval-style `test` (a `check(candidate)` function) with its `entry_point`. Verifier `code`.
- both: optional `id` (default: the row's line number) and `split` (`train` | `eval`; without it,
  a seeded split puts round(eval_fraction x N) rows in eval, at least 1 and leaving 1 for train).

The steps, in order:
1. every row is checked (columns, types, ids) and its gold goes through its verifier, as a model reply
   would ("Answer: <answer>"; the solution in a ```python block): a bad row is reported as
   `INPUT:LINE: why` (`gold fails verifier NAME: ...`);
2. exact and near duplicates of the question / prompt (dedup.py: normalised text, word 3-gram
   Jaccard >= `near_threshold`; long templated problems that differ in one number count as near)
   are removed, keeping the first: within each given split, or over all rows when it is drawn;
3. the split; then leakage: an eval item whose text equals or nearly matches a train item is
   removed from eval (the train copy stays) and reported. A drawn split comes after step 2, so
   leaks are found in a given `split` column.
Every bad row of all three steps is found in one pass. With any, nothing but OUT/report.json is
written and a GoldError lists them all (the CLI prints each, exit 2), unless `drop_failing`
(`--skip-bad`): then the good rows are written and the report counts what was dropped.

OUT gets `train.jsonl` and `eval.jsonl` (the posttrain JSONL task format, tasks/jsonl.py, with
ids `DOMAIN/ID`; DOMAIN is `--domain`, default the input's stem. `posttrain eval --tasks
OUT/eval.jsonl` names its domain after the file, `eval`) and `report.json` (`counts`, then the
rows behind them). OUT is built in a temp dir beside it and renamed into place only when complete; an
existing non-empty OUT is refused unless `force`. Bad input is one DataError / ConfigError line
naming the file, line or column (the CLI exits 2).
"""

from __future__ import annotations

import json
import os
import random
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

from posttrain.core.errors import ConfigError, DataError
from posttrain.core.fsio import replace_dir
from posttrain.tasks import dedup
from posttrain.tasks.build_rows import Failure, Item, load_items
from posttrain.core.types import Trajectory

KINDS = ("qa", "code")


@dataclass(frozen=True)
class BuildOptions:
    kind: str  # "qa" | "code"
    verifier: str | None = None  # qa: default "exact"; code: always "code"
    eval_fraction: float = 0.1  # of the rows, when there is no `split` column
    seed: int = 0  # of that split
    near_threshold: float = dedup.DEFAULT_NEAR_THRESHOLD  # word 3-gram Jaccard
    domain: str | None = None  # default: the input file's stem
    drop_failing: bool = False  # drop rows whose gold fails (else: write nothing)
    force: bool = False  # replace a non-empty OUT


@dataclass(frozen=True)
class Removed:
    row: str  # the duplicate (or leaked eval) row
    of: str  # the row it repeats (kept)
    kind: str  # "exact" | "near"
    similarity: float
    text: str  # its question / prompt, shortened


@dataclass(frozen=True)
class BuildReport:
    input: str
    out: str
    kind: str
    verifier: str
    domain: str
    rows: int  # read
    failing: tuple[Failure, ...]  # dropped (with drop_failing; else nothing is built)
    duplicates: tuple[Removed, ...]
    leaks: tuple[Removed, ...]  # removed from eval
    train: int
    eval: int
    settings: Mapping[str, Any] = field(default_factory=dict)

    def count(self, removed: tuple[Removed, ...], kind: str) -> int:
        return sum(r.kind == kind for r in removed)

    def to_json(self) -> dict:
        """report.json: `counts` first, then the rows behind them."""
        counts = {"rows": self.rows, "failing": len(self.failing),
                  "duplicates": {k: self.count(self.duplicates, k) for k in ("exact", "near")},
                  "leaks": {k: self.count(self.leaks, k) for k in ("exact", "near")},
                  "train": self.train, "eval": self.eval}
        return {"counts": counts, **asdict(self)}


class GoldError(DataError):
    """Every bad row of the input, found in one pass (`failures`: malformed rows, golds that fail their
    verifier, duplicates, train/eval leaks, in input order); the one-line message names the first and
    counts the rest."""

    def __init__(self, failures: list[Failure]):
        k = len(failures) - 1
        more = f" (and {k} more bad row{'s' * (k > 1)}; --skip-bad writes the good rows)" if k else ""
        super().__init__(f"{failures[0].row}: {failures[0].reason}{more}")
        self.failures = tuple(failures)


def _line(row: str) -> int:
    tail = row.rpartition(":")[2]
    return int(tail) if tail.isdigit() else 0


def as_failures(removed: list[Removed], what: str) -> list[Failure]:
    """Duplicates / leaks as bad rows: `duplicate of INPUT:LINE (near, J=0.83)`."""
    def place(r: Removed) -> str:  # "line 2" within the same file
        same = r.of.rpartition(":")[0] == r.row.rpartition(":")[0]
        return f"line {r.of.rpartition(':')[2]}" if same else r.of

    return [Failure(r.row, f"{what} {place(r)} ({r.kind}{'' if r.kind == 'exact' else f', J={r.similarity:.2f}'})")
            for r in removed]


def check_options(opts: BuildOptions) -> str:
    """The verifier name to use; a ConfigError for a bad option."""
    from posttrain.verifiers import get_verifier

    if opts.kind not in KINDS:
        raise ConfigError(f"--kind must be one of {', '.join(KINDS)}, got {opts.kind!r}")
    if opts.kind == "code" and opts.verifier not in (None, "code"):
        raise ConfigError(f"--verifier: code tasks are verified by 'code' (their tests), not {opts.verifier!r}")
    name = opts.verifier or ("code" if opts.kind == "code" else "exact")
    get_verifier(name)
    if not 0 <= opts.eval_fraction <= 1:
        raise ConfigError(f"--eval-fraction must be in [0, 1], got {opts.eval_fraction}")
    if not 0 < opts.near_threshold <= 1:
        raise ConfigError(f"--near-threshold must be in (0, 1], got {opts.near_threshold}")
    return name


def stem(path: Path) -> str:
    """`data/qa.csv` -> `qa`; `code.jsonl.gz` -> `code`."""
    name = path.name
    return next((name[: -len(s)] for s in (".jsonl.gz", ".jsonl", ".csv") if name.lower().endswith(s)), path.stem)


def check_out(out: Path, force: bool) -> None:
    if out.is_dir() and [p.name for p in out.iterdir()] == ["report.json"]:
        return  # a refused build's report only: replaced by this build
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out}: --out exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ConfigError(f"{out}: --out exists and is not empty (--force replaces it)")


def _why(name: str, score) -> str | None:
    """Why a gold's score from verifier `name` is not a pass (None: it passes)."""
    if score is None:
        cannot = {"numeric": "the gold answer is not a number", "code": "the tests do not run"}
        return f"gold fails verifier {name}: it cannot judge it ({cannot.get(name, 'no reference it can read')})"
    if score.value >= 1.0:
        return None
    d = score.details
    if "tests" in d:
        detail = f"{d.get('passed')}/{d.get('tests')} tests passed" + (f": {d['error']}" if d.get("error") else "")
    else:
        detail = f"read {d.get('answer')!r}" if "answer" in d else ""
    return f"gold fails verifier {name}: scored {score.value:g}" + (f" ({detail})" if detail else "")


def check_golds(items: list[Item]) -> list[Failure]:
    """Each item's gold reply through each of its task's verifiers; one Failure per failing row."""
    from posttrain.verifiers import verify_groups

    groups = [(it.task, [Trajectory(task_id=it.task.id, token_ids=(), loss_mask=(), logprobs=(), prompt_len=0,
                                    text=it.gold)]) for it in items]
    failures: list[Failure] = []
    for it, (verdicts, _) in zip(items, verify_groups(groups)):
        scores, errors = verdicts[0]
        if errors:
            failures.append(Failure(it.row, f"gold fails verifier {errors[0]}"))
            continue
        by_name = {s.verifier: s for s in scores}
        reason = next((r for name in it.task.verifiers if (r := _why(name, by_name.get(name)))), None)
        if reason:
            failures.append(Failure(it.row, reason))
    return failures


def _short(text: str, n: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _removed(items: list[Item], m: dedup.Match, of: list[Item]) -> Removed:
    return Removed(items[m.item].row, of[m.of].row, m.kind, round(m.similarity, 4), _short(items[m.item].text))


def deduplicate(items: list[Item], threshold: float) -> tuple[list[Item], list[Removed]]:
    """Items with exact / near duplicates removed within each given split (all together without one)."""
    dropped: dict[int, Removed] = {}
    for split in dict.fromkeys(it.split for it in items):
        idx = [i for i, it in enumerate(items) if it.split == split]
        group = [items[i] for i in idx]
        for m in dedup.deduplicate([it.text for it in group], threshold):
            dropped[idx[m.item]] = _removed(group, m, group)
    return [it for i, it in enumerate(items) if i not in dropped], [dropped[i] for i in sorted(dropped)]


def split(items: list[Item], fraction: float, seed: int) -> tuple[list[Item], list[Item]]:
    """(train, eval) in input order: by the `split` column, else a seeded draw of the eval rows."""
    if items and items[0].split is not None:
        return [it for it in items if it.split == "train"], [it for it in items if it.split == "eval"]
    n = len(items)
    n_eval = round(fraction * n)
    if n >= 2:
        n_eval = min(max(n_eval, 1 if fraction > 0 else 0), n - 1 if fraction < 1 else n)
    order = list(range(n))
    random.Random(seed).shuffle(order)
    chosen = set(order[:n_eval])
    return [it for i, it in enumerate(items) if i not in chosen], [it for i, it in enumerate(items) if i in chosen]


def remove_leaks(train: list[Item], evals: list[Item], threshold: float) -> tuple[list[Item], list[Removed]]:
    """Eval items whose text equals or nearly matches a train item's, removed (and reported)."""
    leaks = dedup.find_leaks([it.text for it in train], [it.text for it in evals], threshold)
    gone = {m.item for m in leaks}
    return [it for i, it in enumerate(evals) if i not in gone], [_removed(evals, m, train) for m in leaks]


def _jsonl(items: list[Item]) -> str:
    return "".join(json.dumps(it.record, ensure_ascii=False) + "\n" for it in items)


def write_out(out: Path, files: dict[str, str]) -> None:
    """`files` (name -> text) as the directory `out`, which appears only once all are written."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.build-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        for name, text in files.items():
            (tmp / name).write_text(text, encoding="utf-8")
        replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def build_tasks(input_path: str | Path, out: str | Path, opts: BuildOptions) -> BuildReport:
    """Validate, deduplicate and split INPUT into OUT (see the module docstring)."""
    path, out = Path(input_path), Path(out)
    verifier = check_options(opts)
    check_out(out, opts.force)
    domain = opts.domain or stem(path)
    if not domain or "/" in domain or domain != domain.strip():
        raise ConfigError(f"--domain must be a non-empty name without '/', got {domain!r}")
    rows, items, malformed = load_items(path, opts.kind, verifier, domain)
    failures = malformed + check_golds(items)
    failing = {f.row for f in failures}
    good = [it for it in items if it.row not in failing]
    kept, duplicates = deduplicate(good, opts.near_threshold)
    train, evals = split(kept, opts.eval_fraction, opts.seed)
    evals, leaks = remove_leaks(train, evals, opts.near_threshold)
    report = BuildReport(
        input=str(path), out=str(out), kind=opts.kind, verifier=verifier, domain=domain, rows=rows,
        failing=tuple(failures), duplicates=tuple(duplicates), leaks=tuple(leaks),
        train=len(train), eval=len(evals),
        settings={"eval_fraction": opts.eval_fraction, "seed": opts.seed, "near_threshold": opts.near_threshold,
                  "ngram": dedup.NGRAM, "split_column": bool(kept and kept[0].split is not None)},
    )
    bad = sorted(failures + as_failures(duplicates, "duplicate of") + as_failures(leaks, "eval row leaks train row"),
                 key=lambda f: _line(f.row))
    text = json.dumps({**report.to_json(), "written": not bad or opts.drop_failing}, indent=2, ensure_ascii=False) + "\n"
    if bad and not opts.drop_failing:  # nothing but the report is written: every bad row in it, in one pass
        write_out(out, {"report.json": text})
        raise GoldError(bad)
    if not train and not evals:
        raise DataError(f"{path}: no good row ({len(bad)} bad); nothing to write")
    files = {"train.jsonl": _jsonl(train), "eval.jsonl": _jsonl(evals), "report.json": text}
    write_out(out, files)
    return report

