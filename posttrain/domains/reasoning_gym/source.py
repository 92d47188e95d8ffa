"""Reasoning-gym as a task source: every registered dataset, usable by name.

    tasks = make_tasks("basic_arithmetic", n=50, seed=1_000_000)
    score(tasks[0], "...\\nAnswer: 42")          # the dataset's own score_answer, in [0, 1]

One prompt format everywhere (SFT data, eval, RL): a single user message holding the
question and `INSTRUCTION`, asking for a last line `Answer: <answer>`. `extract_answer`
reads that line back. `Task.reference` holds the reasoning-gym entry (question, answer,
metadata) — all that `score_answer` needs; the dataset object itself is rebuilt per
(domain, seed, config) and cached.

Seeds: a task made with seed S at index i is reasoning-gym's item `S + i`. Training data
(`sft_examples`, the base corpus) comes from `training_tasks`: seeds below `EVAL_SEED_START`
(where eval starts), and any question that also occurs among the first `HOLDOUT` eval
items of its domain is skipped — small problem spaces repeat questions across seeds, so
disjoint seeds alone would still leak about 1 in 1000 eval questions into training.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import tempfile
from functools import lru_cache
from typing import Any, Mapping

from posttrain.core.errors import ConfigError
from posttrain.domains.reasoning_gym import build as rg_build
from posttrain.domains.reasoning_gym import scorers as rg_scorers
from posttrain.domains.reasoning_gym.build import build_report, skipped_items  # noqa: F401  (public readers)
from posttrain.tasks.worked import gold_answer as _gold_for_entry
from posttrain.tasks.worked import worked_steps
from posttrain.core.types import Score, Task, Trajectory
from posttrain.verifiers.answer import ANSWER_TAG, INSTRUCTION, extract_answer  # noqa: F401  (re-exported)

EVAL_SEED_START = 1_000_000
HOLDOUT = 1000  # eval items per domain (from EVAL_SEED_START) that training never contains
# Slow domains hold out fewer: the largest of HOLDOUT_STEPS that builds within HOLDOUT_BUDGET_S at the
# domain's checked-in seconds per item (their puzzle spaces are large, so chance repeats are negligible).
HOLDOUT_STEPS = (HOLDOUT, 500, 200, 100, 50)
HOLDOUT_BUDGET_S = 5.0
HOLDOUT_OVERRIDES: dict[str, int] = {}  # domain -> holdout, over the budget rule
MAX_FAILED_IN_A_ROW = 64  # items in a row whose generator raised: the domain (or its options) is broken
CREDITS = ("full", "partial")
FULL_MARKS = 1.0 - 1e-9
VERIFIER = "reasoning_gym"


def _registry() -> dict[str, Any]:
    import reasoning_gym  # noqa: F401  (importing registers every dataset)
    from reasoning_gym.factory import DATASETS

    return DATASETS


def list_domains() -> list[str]:
    """Names of every reasoning-gym dataset, sorted."""
    return sorted(_registry())


def check_domain(domain: str) -> None:
    """Raise ConfigError naming the closest valid domains when `domain` is unknown."""
    names = list_domains()
    if domain in names:
        return
    close = difflib.get_close_matches(domain, names, n=5, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise ConfigError(
        f"unknown reasoning-gym domain {domain!r}: {hint}"
        f"run `posttrain tasks list` to see all {len(names)} (e.g. {', '.join(names[:4])}, ...)"
    )


# Datasets that cannot be built without options get these when none are given.
DEFAULT_CONFIGS: dict[str, dict[str, Any]] = {
    "composite": {
        "datasets": [
            {"name": "basic_arithmetic", "weight": 1.0, "config": {}},
            {"name": "chain_sum", "weight": 1.0, "config": {}},
        ]
    },
}


def _composite_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    from reasoning_gym.composite import DatasetSpec

    specs = [DatasetSpec(**spec) if isinstance(spec, dict) else spec for spec in kwargs.get("datasets", [])]
    return {**kwargs, "datasets": specs}


# Domain -> function turning JSON-able options into the dataset's constructor kwargs.
KWARG_ADAPTERS: dict[str, Any] = {"composite": _composite_kwargs}


def _config_key(domain: str, config: Mapping[str, Any] | None) -> str:
    chosen = dict(config) if config else DEFAULT_CONFIGS.get(domain, {})
    return json.dumps(chosen, sort_keys=True, default=str)


@lru_cache(maxsize=512)
def _dataset(domain: str, seed: int, size: int, config_key: str):
    import reasoning_gym

    check_domain(domain)
    kwargs = json.loads(config_key)
    try:
        adapted = KWARG_ADAPTERS.get(domain, dict)(kwargs)
        return reasoning_gym.create_dataset(domain, size=size, seed=seed, **adapted)
    except (TypeError, AssertionError, ValueError, KeyError) as e:
        raise ConfigError(f"reasoning-gym domain {domain!r}: bad dataset config {kwargs}: {e}") from None


# domains whose generators run code snippets that write files into the working directory and print
# (reasoning-gym's codeio): their items are built in a scratch directory with their output silenced
SCRATCH_DOMAINS = frozenset({"codeio"})


@contextlib.contextmanager
def _contained(domain: str):
    if domain not in SCRATCH_DOMAINS:
        yield
        return
    here = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="posttrain-rg-") as scratch, open(os.devnull, "w") as sink:
        os.chdir(scratch)
        try:
            with contextlib.redirect_stdout(sink):
                yield
        finally:
            os.chdir(here)


def _entries(domain: str, seed: int, n: int, config_key: str) -> tuple[int, list[tuple[int, dict]]]:
    with _contained(domain):
        return _entries_here(domain, seed, n, config_key)


def _entries_here(domain: str, seed: int, n: int, config_key: str) -> tuple[int, list[tuple[int, dict]]]:
    """`n` (offset, entry) items from seed `seed` on; an item whose generator raises is skipped (counted
    in `skipped_items`) and the next one taken. Returns the size of the dataset read (grown past `n`
    when items were skipped: datasets keep their items' prefix as the size grows) and the items."""
    size, out, i, failed, last = n, [], 0, 0, ""
    ds, clock = _dataset(domain, seed, size, config_key), rg_build.timed()
    while len(out) < n:
        if i >= size:
            size = n + 2 * (i - len(out)) + 8
            ds = _dataset(domain, seed, size, config_key)
        try:
            entry = ds[i]
        except Exception as e:  # a generator bug for one seed must not stop a run
            rg_build.record_skip(domain, config_key, seed + i)
            failed, last = failed + 1, f"{type(e).__name__}: {e}"
            if failed >= MAX_FAILED_IN_A_ROW:
                raise ConfigError(f"reasoning-gym domain {domain!r}: {failed} items in a row failed to generate "
                                  f"(seeds {seed + i - failed + 1}..{seed + i}; last: {last[:200]}); check its options")
        else:
            out.append((i, entry))
            failed = 0
        i += 1
    rg_build.record_build(domain, len(out), clock())
    return size, out


def format_prompt(question: str) -> str:
    return f"{question.rstrip()}\n\n{INSTRUCTION}"


def make_tasks(domain: str, n: int, seed: int, *, config: Mapping[str, Any] | None = None) -> list[Task]:
    """`n` tasks of `domain` from reasoning-gym items seed, seed+1, ...: an item whose generator raises
    is skipped (and counted, `skipped_items`) and the next seed taken, so the same arguments always give
    the same n tasks. `metadata["index"]` is the item's offset from `seed` (the task id is `domain/seed+index`).

    `config` passes dataset options through (e.g. {"max_terms": 3}); unknown domain or
    options raise ConfigError.
    """
    if n <= 0:
        raise ConfigError(f"reasoning-gym domain {domain!r}: number of tasks must be > 0 (got {n})")
    key = _config_key(domain, config)
    size, entries = _entries(domain, seed, n, key)
    return [
        Task(
            id=f"{domain}/{seed + i}",
            domain=domain,
            prompt=({"role": "user", "content": format_prompt(entry["question"])},),
            reference=entry,
            verifiers=(VERIFIER,),
            metadata={"source": "reasoning_gym", "seed": seed, "index": i, "size": size, "config": key},
        )
        for i, entry in entries
    ]


def raw_score(task: Task, completion: str) -> float:
    """The dataset's own `score_answer` on the extracted answer, clipped to [0, 1] (partial credit kept)."""
    meta = task.metadata
    ds = _dataset(task.domain, int(meta.get("seed", 0)), int(meta.get("size", 1)), meta.get("config", "{}"))
    try:
        value = float(ds.score_answer(extract_answer(completion), task.reference))
    except Exception:  # a scorer that chokes on malformed model output scores 0, never crashes a run
        return 0.0
    return min(1.0, max(0.0, value))


def credit(task: Task) -> str:
    """How `score` treats the dataset's score on `task`: "full" (1 only for full marks, else 0) or "partial"
    (the raw score). The domain's `verifier_options: {reasoning_gym: {credit: ...}}` decides, else the
    checked-in audit (rg_scorers.json: "full" where its scorer gives wrong answers credit)."""
    opts = ((task.metadata or {}).get("verifier_options") or {}).get(VERIFIER) or {}
    chosen = opts.get("credit") if isinstance(opts, dict) else None
    if chosen is None:
        domain = task.domain
        if domain == "composite" and isinstance(task.reference, dict):  # scored by the item's own dataset
            domain = (task.reference.get("metadata") or {}).get("source_dataset", domain)
        return rg_scorers.default_credit(domain)
    if chosen not in CREDITS:
        raise ConfigError(f"verifier_options.{VERIFIER}.credit must be one of {', '.join(CREDITS)}, got {chosen!r}")
    return chosen


def verify(task: Task, traj: Trajectory) -> Score:
    """The `reasoning_gym` verifier: the dataset's own scorer on the completion (see `score`)."""
    return Score(score(task, traj.text), VERIFIER)


def score(task: Task, completion: str) -> float:
    """The task's reward in [0, 1]: `raw_score`, or under `credit(task) == "full"` 1.0 only when the dataset
    gives full marks (a wrong answer scores 0, however much partial credit the dataset's scorer gives it)."""
    value = raw_score(task, completion)
    if credit(task) == "full":
        return 1.0 if value >= FULL_MARKS else 0.0
    return value


def gold_answer(task: Task) -> str | None:
    """A correct answer (the dataset's, or one valid answer for checker-scored domains), else None."""
    return _gold_for_entry(task.domain, task.reference)


def gold_completion(task: Task) -> str | None:
    """A correct worked solution in the format the prompt asks for; None when there is no gold."""
    answer = gold_answer(task)
    if answer is None:
        return None
    steps = worked_steps(task.domain, task.reference)
    answer_line = f"{ANSWER_TAG} {answer}"
    return f"{steps}\n{answer_line}" if steps else answer_line


def split_count(n: int, parts: int) -> list[int]:
    """n split as evenly as possible into `parts` counts (earlier parts get the remainder)."""
    return [n // parts + (1 if i < n % parts else 0) for i in range(parts)]


def holdout_size(domain: str) -> int:
    """Eval items per domain whose questions training skips, by default: `HOLDOUT_OVERRIDES`, else the
    largest of `HOLDOUT_STEPS` whose build fits `HOLDOUT_BUDGET_S` at the domain's checked-in seconds per
    item (rg_scorers.json; fixed data, so every machine holds out the same items), never below the last step."""
    if domain in HOLDOUT_OVERRIDES:
        return HOLDOUT_OVERRIDES[domain]
    per_item = rg_scorers.item_seconds(domain)
    for size in HOLDOUT_STEPS:
        if size * per_item <= HOLDOUT_BUDGET_S:
            return size
    return HOLDOUT_STEPS[-1]


def held_out_questions(domain: str, config_key: str, size: int | None = None) -> frozenset[str]:
    """The questions of the first `size` (default `holdout_size`) eval items of `domain` (raising items
    skipped, like `make_tasks`); kept in memory and on disk (`rg_build.cache_dir()`)."""
    size = holdout_size(domain) if size is None else size
    return rg_build.cached_questions(domain, config_key, size, lambda: _held_out_build(domain, config_key, size))


def _held_out_build(domain: str, config_key: str, size: int) -> tuple[list[str], list[int]]:
    _, entries = _entries(domain, EVAL_SEED_START, size, config_key)
    kept = {i for i, _ in entries}
    skipped = [EVAL_SEED_START + i for i in range(entries[-1][0] + 1) if i not in kept]
    return [entry["question"] for _, entry in entries], skipped


MIN_DISTINCT = 16  # distinct training questions below which a domain's supply counts as used up


class SmallSpaceError(ConfigError):
    """The held-out eval items leave (almost) no distinct question to train on (`check_supply`)."""


def check_supply(domain: str, questions: list[str], scanned: int, holdout: int, wanted: int) -> None:
    """ConfigError when the held-out eval items leave (almost) no distinct question to train on:
    fewer than min(MIN_DISTINCT, wanted) among the training `questions` kept from `scanned` items
    (a small question space, e.g. the 200 of 2-term single-digit chain_sum, used up by a large holdout)."""
    distinct = len(set(questions))
    if distinct < min(MIN_DISTINCT, wanted):
        raise SmallSpaceError(
            f"reasoning-gym domain {domain!r}: only {distinct} distinct training question(s) in {scanned} items "
            f"outside the {holdout} held-out eval items (its question space is small); set a smaller holdout "
            f"(the domain's `holdout`, at least the eval items you score) or harder options")


def training_tasks(domain: str, n: int, seed: int, *, config: Mapping[str, Any] | None = None,
                   holdout: int | None = None) -> list[Task]:
    """`n` tasks from seeds `seed, seed+1, ...` (all below EVAL_SEED_START), skipping held-out questions:
    those of the first `holdout` eval items with the domain's default options, which is what `posttrain eval`
    runs (with `config`, e.g. easier settings, the tasks differ but must still avoid those questions).
    A question space the holdout uses up is a ConfigError (`check_supply`), not n copies of one question."""
    holdout = holdout_size(domain) if holdout is None else holdout
    held_out = held_out_questions(domain, _config_key(domain, None), holdout)
    if config:  # and those of eval run with the same options
        held_out = held_out | held_out_questions(domain, _config_key(domain, config), holdout)
    out: list[Task] = []
    start, want = seed, n
    while len(out) < n and start - seed <= 50 * n + 1000:  # past that, skipping nearly everything: used up
        batch = want + max(16, want // 20)  # a margin for skipped questions
        if start < 0 or start + batch > EVAL_SEED_START:
            raise ConfigError(
                f"training data for {domain!r}: seeds {start}..{start + batch - 1} overlap eval seeds "
                f"(>= {EVAL_SEED_START}); use a smaller seed or fewer examples"
            )
        fresh = [t for t in make_tasks(domain, batch, start, config=config) if t.reference["question"] not in held_out]
        out.extend(fresh[: n - len(out)])
        start, want = start + batch, n - len(out)
    check_supply(domain, [t.reference["question"] for t in out], start - seed, holdout, n)
    if len(out) < n:
        raise ConfigError(f"reasoning-gym domain {domain!r}: only {len(out)} of {n} training items outside the "
                          f"held-out eval items in {start - seed} items; set a smaller holdout or harder options")
    return out


def sft_examples(
    domains: list[str], n: int, seed: int, options: Mapping[str, Mapping[str, Any]] | None = None
) -> list[dict]:
    """`n` chat examples `{"messages": [user, assistant]}` with correct worked answers.

    Split evenly over `domains` and interleaved (round-robin); `options` gives reasoning-gym
    options per domain (e.g. {"chain_sum": {"max_terms": 3}}). Items come from
    `training_tasks` (seeds from `seed`, below EVAL_SEED_START, held-out questions skipped).
    """
    if not domains:
        raise ConfigError("sft_examples: give at least one reasoning-gym domain")
    for domain in domains:
        check_domain(domain)
    counts = split_count(n, len(domains))
    options = options or {}
    per_domain = [training_tasks(d, c, seed, config=options.get(d)) if c else [] for d, c in zip(domains, counts)]
    for domain, tasks in zip(domains, per_domain):
        if tasks and gold_completion(tasks[0]) is None:
            raise ConfigError(f"sft_examples: reasoning-gym domain {domain!r} has no gold answers to learn from")
    out = []
    for i in range(max(counts, default=0)):
        for tasks in per_domain:
            if i < len(tasks):
                task = tasks[i]
                out.append(
                    {
                        "messages": [
                            dict(task.prompt[0]),
                            {"role": "assistant", "content": gold_completion(task)},
                        ]
                    }
                )
    return out
