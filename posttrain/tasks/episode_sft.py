"""SFT examples played through the episode loop: each task's oracle, rendered token for token as RL sees it.

    records, info = episode_demos("sql,document:400", seed=0, task_options={"sql": {"level": 1}},
                                  tokenizer=tok, parser="auto")
    records[i] == {"input_ids": [...], "loss_mask": [...]}     # train/data.py token records
    info == {"episodes": 400, "kept": 400, "dropped": 0, "dropped_by": {}, "seconds": ...}

`data.train: "episodes:NAME[,NAME...]:N"` (recipes/sft.py) gives N examples split evenly over the
names. Each name is a task source with an oracle: a generated domain's scripted turns
(tasks/generated.py `oracle_turns`: sql, document, cad, terminal_gen) or a source's gold demonstration
(tasks/registry.py `demo`: BFCL's gold calls, one turn). Every task's oracle is played by an
`OracleEngine` (envs/oracle.py: the turns written by the run's tool-call parser, tokenized, ended by
the end-of-turn token) through `rollout` (envs/rollout.py), the loop RL runs: the model's chat
template renders the prompt and tools, the parser reads the turns back, the env steps, tool
results are bridged in. The example is the trajectory itself: `input_ids` = its token ids (prompt,
turns, tool results), `loss_mask` = its loss mask (1 on the policy's tokens only, each turn's
end-of-turn token included), exactly what an RL step trains on.

Only episodes the task's own verifiers give full marks (reward 1.0) are kept; the others are
counted by why (`info["dropped_by"]`: their stop reason, or "reward<1"). Only training tasks are
played: a generated domain's train split (seeds `seed * SEED_STRIDE` upward, below the held-out
seeds), a split source's `split: train` (the default here); asking for another split is an error.
"""

from __future__ import annotations

import difflib
import random
import time
from collections import Counter
from typing import Any, Callable, Mapping

from posttrain.core.errors import ConfigError, DataError
from posttrain.core.registry import domains_loaded
from posttrain.core.types import Task
from posttrain.engine.protocol import SamplingParams
from posttrain.envs.env import Resources
from posttrain.envs.oracle import OracleEngine
from posttrain.envs.rollout import chat_format, rollout
from posttrain.tasks.generated import OracleTurn, generator
from posttrain.tasks.registry import is_generated, make_source_tasks, source_demo, sources
from posttrain.tasks.sft_data import count_spec
from posttrain.verifiers.registry import run_verifiers, task_score

SEED_STRIDE = 100_000  # generated tasks of data seed s start at s * SEED_STRIDE (eval's seed + 1: disjoint)
END_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|end|>")  # the turn's end token, when the tokenizer has one
Oracle = Callable[[Task], "list[OracleTurn] | None"]


def playable() -> list[str]:
    """Every source `episodes:` can play: generated domains and sources with a gold demonstration."""
    return sorted(n for n, s in sources().items() if s.levels is not None or s.demo is not None)


def _demo_oracle(demo) -> Oracle:
    def turns(task: Task) -> list[OracleTurn] | None:
        gold = demo(task)
        if gold is None:
            return None
        return [OracleTurn(content=gold)] if isinstance(gold, str) else [OracleTurn(calls=tuple(gold))]

    return turns


def episode_oracle(name: str, where: str) -> Oracle:
    """The oracle of source `name` as scripted turns; a one-line DataError naming `where` otherwise."""
    known = sources()
    if name not in known:
        close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.5)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        if not domains_loaded():
            hint += " (posttrain.domains was not loaded: import posttrain.domains; load_domains())"
        raise DataError(f"{where}: unknown task source {name!r}{hint}; playable: {', '.join(playable())}")
    if is_generated(name):
        return generator(name).oracle
    demo = source_demo(name)
    if demo is None:
        raise DataError(f"{where}: source {name!r} has no oracle (no generated oracle, no gold demonstration); "
                        f"playable: {', '.join(playable())}")
    return _demo_oracle(demo)


def training_tasks(name: str, n: int, seed: int, options: Mapping[str, Any], where: str) -> list[Task]:
    """`n` training tasks of `name` (never its held-out split), drawn by `seed`."""
    opts = dict(options)
    split = opts.setdefault("split", "train")
    if split != "train":
        raise DataError(f"{where}: {name}: split {split!r} reaches held-out tasks; episode demonstrations "
                        "are played on training tasks only (split: train)")
    try:
        if is_generated(name):
            return make_source_tasks(name, n, seed * SEED_STRIDE, opts)
        pool = make_source_tasks(name, None, 0, opts)
    except ConfigError as e:
        raise DataError(f"{where}: {e}") from None
    random.Random(f"episodes:{name}:{seed}").shuffle(pool)
    return pool[:n]


def end_token(tokenizer) -> str:
    vocab = tokenizer.get_vocab()
    for tok in END_TOKENS:
        if tok in vocab:
            return tok
    if tokenizer.eos_token:
        return tokenizer.eos_token
    raise DataError("episodes: the tokenizer has no end-of-turn token to end the oracle's turns with")


def episode_demos(spec: str, seed: int = 0, task_options: Mapping[str, Mapping[str, Any]] | None = None,
                  tokenizer=None, parser: str = "auto", resources: Resources | None = None,
                  max_concurrent: int = 64) -> tuple[list[dict], dict]:
    """'NAME[,NAME...]:N' -> (token records of the full-marks oracle episodes, counts); see the module doc."""
    where = f"episodes:{spec}"
    names, n = count_spec("episodes", spec, "episodes:sql,document:400")
    if tokenizer is None:
        raise DataError(f"{where}: episode demonstrations need the model's tokenizer")
    oracles = {name: episode_oracle(name, where) for name in names}
    counts = [n // len(names) + (i < n % len(names)) for i in range(len(names))]
    tasks, scripts, dropped = [], [], Counter()
    for name, count in zip(names, counts):
        for task in training_tasks(name, count, seed, (task_options or {}).get(name, {}), where) if count else []:
            turns = oracles[name](task)
            if turns:
                tasks.append(task)
                scripts.append(turns)
            else:
                dropped["no_oracle"] += 1
    if not tasks:
        raise DataError(f"{where}: no task with an oracle to play")
    started = time.perf_counter()
    try:
        fmt = chat_format(tokenizer, tasks, parser)
        # episode seeds 1..K: every turn seed (envs/episode.py turn_seed) is then distinct for K < 1e6
        seeds = list(range(1, len(tasks) + 1))
        engine = OracleEngine(tokenizer, fmt.parser, dict(zip(seeds, scripts)), end_token(tokenizer))
    except (ConfigError, ValueError) as e:
        raise DataError(f"{where}: {e}") from None
    params = SamplingParams(max_tokens=1 << 30, temperature=1.0)
    groups = rollout(engine, tokenizer, tasks, [1] * len(tasks), params, seeds, version=0, parser=parser,
                     resources=resources or Resources(), max_concurrent=max_concurrent)
    records = []
    for task, (traj,) in zip(tasks, groups):
        scores, _errors = run_verifiers(task, traj) if traj.token_ids else ([], [])
        reward = task_score(scores, task) if scores else None
        if traj.stop_reason != "done" or reward is None or reward < 1.0:
            dropped[traj.stop_reason if traj.stop_reason != "done" else "reward<1"] += 1
            continue
        records.append({"input_ids": list(traj.token_ids), "loss_mask": list(traj.loss_mask)})
    info = {"episodes": len(tasks) + dropped["no_oracle"], "kept": len(records), "dropped": sum(dropped.values()),
            "dropped_by": dict(dropped), "seconds": time.perf_counter() - started}
    if not records:
        raise DataError(f"{where}: no oracle episode scored full marks ({dict(dropped)})")
    return records, info
