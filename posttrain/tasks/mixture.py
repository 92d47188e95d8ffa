"""The RL task mixture: domains with weights, each a task source with a cursor.

    mix = build_mixture(cfg.tasks, task_seed=500_000, seed=0)
    tasks = mix.sample(16, step=3, attempt=0)      # 16 tasks, domains drawn by weight
    state = mix.state_dict(); mix.load_state_dict(state)   # cursors, for exact resume

Which domain each slot gets is drawn from a generator seeded by (seed, step, attempt), so
it needs no saved RNG state; each source advances its own cursor, which the checkpoint
keeps. Sources:
- reasoning-gym: items from seed `task_seed` upwards (below the eval seeds), skipping the
  questions of the held-out eval items; eval tasks are the first items from the eval seed,
  the same ones `posttrain eval` scores;
- JSONL: the file's tasks in an order reshuffled every pass, the last `eval_tasks` lines
  held out for eval;
- a registered source (tasks/registry.py: humaneval, bfcl_*, terminal, needle, ...): its tasks
  the same way; with `options: {split: train}` eval takes the source's `test` split instead;
- a generated domain (tasks/generated.py: sql, document, cad): training tasks from seed
  `task_seed` upward (a cursor, like reasoning-gym's), eval tasks from its held-out test seeds.

Levels (scheduler/curriculum.py): `source.set_options(options)` (or `mix.set_options(domain,
options)`) switches what training draws from the next `take` on: a reasoning-gym source's dataset config (domains/reasoning_gym/mixture.py),
GeneratedSource's options (`level`), a registered source's options (terminal: `level`). The cursor
carries on. Eval tasks stay at the domain's configured options, so eval curves remain comparable
across levels. A source's `state_dict` is {"cursor": n}, plus "options" while they differ from the
configured ones; `load_state_dict` restores both (a state without "options" is the configured ones).
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any, Callable, Protocol, Sequence

from posttrain.core.errors import ConfigError
from posttrain.tasks.jsonl import load_tasks
from posttrain.tasks.registry import (FAMILIES, check_name, expand_group, group_of, is_generated, is_group, is_source,
                                      make_source_tasks, missing_data)
from posttrain.core.types import Task

class Source(Protocol):
    domain: str

    def take(self, n: int) -> list[Task]: ...
    def eval_tasks(self) -> list[Task]: ...
    def set_options(self, options: dict[str, Any]) -> None: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def source_state(cursor: int, current: dict[str, Any] | None, configured: dict[str, Any] | None) -> dict[str, Any]:
    """A source's state: its cursor, and its current options while they differ from the configured ones."""
    if (current or None) == (configured or None):
        return {"cursor": cursor}
    return {"cursor": cursor, "options": dict(current or {})}


class ListSource:
    """A fixed task list: handed out in an order reshuffled every pass, `held_out` kept for eval.
    With `remake` (options -> the source's tasks), `set_options` swaps the training list for
    remake(options) less the held-out tasks (by id); `options` are the configured ones."""

    def __init__(self, domain: str, train: list[Task], held_out: list[Task], seed: int,
                 remake: Callable[[dict[str, Any]], list[Task]] | None = None, options: dict[str, Any] | None = None):
        if not train:
            raise ConfigError(f"domain {domain!r}: no training tasks left")
        self.domain, self.seed, self.train, self.held_out = domain, seed, train, held_out
        self.cursor = 0  # tasks handed out so far (over all passes)
        self._cached: tuple[int, list[int]] = (-1, [])  # (pass, its order)
        self._remake, self.options = remake, dict(options or {})
        self._configured, self.train_options = train, dict(options or {})

    def set_options(self, options: dict[str, Any] | None) -> None:
        """Training tasks from the next `take` on: the source's tasks under `options`, held-out ones left out."""
        options = dict(options or {})
        if options == self.train_options:
            return
        if options == self.options:
            train = self._configured
        elif self._remake is None:
            raise ConfigError(f"domain {self.domain!r}: its tasks are a fixed list; options cannot change")
        else:
            held = {t.id for t in self.held_out}
            train = [t for t in self._remake(options) if t.id not in held]
            if not train:
                raise ConfigError(f"domain {self.domain!r}: no training tasks left with options {options} "
                                  f"(all are held out for eval)")
        self.train, self.train_options, self._cached = train, options, (-1, [])

    def _order(self, epoch: int) -> list[int]:
        if self._cached[0] != epoch:  # one shuffle per pass, not one per task
            order = list(range(len(self.train)))
            random.Random(f"jsonl:{self.seed}:{self.domain}:{epoch}").shuffle(order)
            self._cached = (epoch, order)
        return self._cached[1]

    def take(self, n: int) -> list[Task]:
        out = []
        for _ in range(n):
            epoch, i = divmod(self.cursor, len(self.train))
            out.append(self.train[self._order(epoch)[i]])
            self.cursor += 1
        return out

    def eval_tasks(self) -> list[Task]:
        return list(self.held_out)

    def state_dict(self) -> dict[str, Any]:
        return source_state(self.cursor, self.train_options, self.options)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.set_options(state.get("options", self.options))
        self.cursor = int(state["cursor"])


def _last_held_out(domain: str, tasks: list[Task], n_eval: int, seed: int, where: str, **kw) -> ListSource:
    """The tasks with their last `n_eval` held out for eval (`kw`: ListSource's remake and options)."""
    if n_eval and len(tasks) <= n_eval:
        raise ConfigError(f"domain {domain!r}: {where} has {len(tasks)} tasks, too few to hold out eval_tasks={n_eval}")
    return ListSource(domain, tasks[: len(tasks) - n_eval] if n_eval else tasks,
                      tasks[len(tasks) - n_eval:] if n_eval else [], seed, **kw)


def jsonl_source(domain: str, path: str, seed: int, n_eval: int) -> ListSource:
    """A JSONL file's tasks; its last `n_eval` lines held out for eval."""
    return _last_held_out(domain, load_tasks(path, domain), n_eval, seed, path)


def registry_source(domain: str, options: dict[str, Any], task_seed: int, seed: int, n_eval: int) -> ListSource:
    """A registered task source (tasks/registry.py: humaneval, bfcl_*, terminal, ...). With
    `split: train` in its options, eval takes `n_eval` tasks of the source's own `test` split (no
    overlap); otherwise its last `n_eval` tasks are held out. `set_options` remakes its training tasks
    under new options (terminal's `level`), the held-out ones left out."""
    tasks = make_source_tasks(domain, None, task_seed, options)

    def remake(opts: dict[str, Any]) -> list[Task]:
        return make_source_tasks(domain, None, task_seed, opts)

    if options.get("split") == "train":
        held_out = make_source_tasks(domain, None, task_seed, {**options, "split": "test"})[:n_eval]
        return ListSource(domain, tasks, held_out, seed, remake, options)
    return _last_held_out(domain, tasks, n_eval, seed, "the source", remake=remake, options=options)


class GeneratedSource:
    """A generated domain: one task per seed, training seeds from `task_seed` up, eval on the test split."""

    def __init__(self, domain: str, options: dict[str, Any], task_seed: int, n_eval: int):
        self.domain, self.task_seed, self.n_eval = domain, task_seed, n_eval
        self.options = {k: v for k, v in options.items() if k != "split"}  # configured: eval uses them
        self.train_options = self.options  # what training draws use (set_options)
        self.cursor = 0
        make_source_tasks(domain, 1, task_seed, {**self.options, "split": "train"})  # bad options fail at build time

    def set_options(self, options: dict[str, Any] | None) -> None:
        """Training draws from the next `take` on use `options` (e.g. {"level": 3}); eval keeps the configured ones."""
        options = {k: v for k, v in (options or {}).items() if k != "split"}
        if options == self.train_options:
            return
        make_source_tasks(self.domain, 1, self.task_seed + self.cursor, {**options, "split": "train"})  # fail now
        self.train_options = options

    def take(self, n: int) -> list[Task]:
        options = {**self.train_options, "split": "train"}
        tasks = make_source_tasks(self.domain, n, self.task_seed + self.cursor, options)
        self.cursor += n
        return tasks

    def eval_tasks(self) -> list[Task]:
        return make_source_tasks(self.domain, self.n_eval, 0, {**self.options, "split": "test"}) if self.n_eval else []

    def state_dict(self) -> dict[str, Any]:
        return source_state(self.cursor, self.train_options, self.options)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.set_options(state.get("options", self.options))
        self.cursor = int(state["cursor"])


class Mixture:
    def __init__(self, sources: Sequence[Source], weights: Sequence[float], seed: int):
        if not sources:
            raise ConfigError("tasks: the mixture is empty; name at least one domain")
        self.sources = list(sources)
        total = float(sum(weights))
        self.weights = [w / total for w in weights]
        self.seed = seed

    @property
    def domains(self) -> list[str]:
        return [s.domain for s in self.sources]

    def sample(self, n: int, step: int, attempt: int = 0) -> list[Task]:
        """n tasks; the domain of each slot is drawn by weight from a generator seeded by (seed, step, attempt)."""
        rng = random.Random(f"mix:{self.seed}:{step}:{attempt}")
        picks = rng.choices(range(len(self.sources)), weights=self.weights, k=n)
        taken = {i: iter(self.sources[i].take(picks.count(i))) for i in sorted(set(picks))}
        return [next(taken[i]) for i in picks]

    def set_options(self, domain: str, options: dict[str, Any]) -> None:
        """Training draws of `domain` use `options` from the next `sample` on (a curriculum level)."""
        for s in self.sources:
            if s.domain == domain:
                s.set_options(options)
                return
        raise KeyError(f"no domain {domain!r} in the mixture")

    def state_dict(self) -> dict[str, Any]:
        return {s.domain: s.state_dict() for s in self.sources}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        missing = [s.domain for s in self.sources if s.domain not in state]
        if missing:
            raise ConfigError(f"saved mixture state has no cursor for domain {missing[0]!r}: was the task list changed?")
        for s in self.sources:
            s.load_state_dict(state[s.domain])


class Rescored:
    """A source whose tasks are scored the domain's way: other verifiers than the ones they name
    (`verifiers`, None keeps theirs), per-verifier options, the rule that combines several
    verifiers and per-verifier pass thresholds (all recorded in each task's metadata, where
    `verifier_options` and `task_score` read them; options and thresholds are merged over the
    task's own, the domain's winning). `thresholds` is {name: t} or a thresholds file's path,
    checked here (calibrate.resolve_thresholds): a bad one fails at build time, before training."""

    def __init__(self, source: Source, verifiers: Sequence[str] | None, options: dict | None = None,
                 combine: str = "mean", weights: dict[str, float] | None = None,
                 thresholds: dict[str, float] | str | None = None):
        from posttrain.verifiers import get_verifier
        from posttrain.verifiers.calibrate import resolve_thresholds

        if verifiers is not None and not verifiers:
            raise ConfigError(f"domain {source.domain!r}: 'verifiers' is empty; name at least one or leave it unset")
        for name in list(verifiers or []) + list(options or {}):
            get_verifier(name)  # unknown names fail at build time, with suggestions
        thresholds = resolve_thresholds(thresholds, f"domain {source.domain!r}: verifier_thresholds")
        self.source, self.domain = source, source.domain
        self.verifiers = tuple(verifiers) if verifiers is not None else None
        self.meta = {k: v for k, v in (("verifier_options", options), ("combine", combine if combine != "mean" else None),
                                       ("verifier_weights", weights), ("verifier_thresholds", thresholds)) if v}

    def _swap(self, tasks: list[Task]) -> list[Task]:
        out = []
        for t in tasks:
            meta = {**t.metadata, **self.meta}
            if "verifier_options" in self.meta:
                meta["verifier_options"] = {**t.metadata.get("verifier_options", {}), **self.meta["verifier_options"]}
            if "verifier_thresholds" in self.meta:
                meta["verifier_thresholds"] = {**(t.metadata.get("verifier_thresholds") or {}),
                                               **self.meta["verifier_thresholds"]}
            out.append(replace(t, verifiers=self.verifiers or t.verifiers, metadata=meta))
        return out

    def take(self, n: int) -> list[Task]:
        return self._swap(self.source.take(n))

    def eval_tasks(self) -> list[Task]:
        return self._swap(self.source.eval_tasks())

    def set_options(self, options: dict[str, Any]) -> None:
        self.source.set_options(options)

    def state_dict(self) -> dict[str, Any]:
        return self.source.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.source.load_state_dict(state)


def build_mixture(domains, *, task_seed: int, seed: int) -> Mixture:
    """A Mixture from config `DomainConfig`s (a registered source, a group member such as a reasoning-gym
    domain by name, or JSONL when `path` is set;
    `verifiers`, when set, replace the ones the domain's tasks name; `verifier_thresholds` set
    their pass thresholds)."""
    from posttrain.verifiers.calibrate import resolve_thresholds

    sources: list[Source] = []
    for d in domains:
        if d.verifier_thresholds is not None:  # checked (a file: read) here, and the values put back into
            where = f"domain {d.name!r}: verifier_thresholds"  # the config, so the saved config holds them
            try:
                d.verifier_thresholds = resolve_thresholds(d.verifier_thresholds, where)
            except ConfigError as e:
                raise ConfigError(str(e) if str(e).startswith(where) else f"{where}: {e}") from None
        if d.path is None and is_group(d.name):  # groups expand in eval suites; a training mix names its domains
            members = expand_group(d.name)
            shown = ", ".join(members[:6]) + (f", ... ({len(members)} in all)" if len(members) > 6 else "")
            raise ConfigError(f"tasks: {d.name!r} is a group, not a domain: name its member domains one entry "
                              f"each ({shown}); `posttrain tasks list` shows them")
        if d.path is None and (fetch := missing_data(d.name)):
            raise ConfigError(f"domain {d.name!r}: its data is not here: run `{fetch}`")
        if d.path is not None:
            source: Source = jsonl_source(d.name, d.path, seed, d.eval_tasks)
        elif is_generated(d.name):
            source = GeneratedSource(d.name, dict(d.options), task_seed, d.eval_tasks)
        elif is_source(d.name):
            source = registry_source(d.name, dict(d.options), task_seed, seed, d.eval_tasks)
        else:  # a member of a group whose domain registered a source class for it (reasoning-gym)
            family = group_of(d.name)
            if family not in FAMILIES:
                check_name(d.name)
                raise ConfigError(f"domain {d.name!r} is no task source, and its group {family!r} has none")
            source = FAMILIES.get(family)(d.name, d.options, task_seed, d.eval_tasks, d.holdout)
        custom = d.verifiers is not None or d.verifier_options or d.combine != "mean" or d.verifier_thresholds
        sources.append(Rescored(source, d.verifiers, d.verifier_options, d.combine, d.verifier_weights,
                                d.verifier_thresholds) if custom else source)
    return Mixture(sources, [d.weight for d in domains], seed)
