"""The RL task mixture: held-out questions stay out of training, cursors resume exactly, domain
draws follow the weights and depend only on (seed, step, attempt), JSONL passes reshuffle."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from posttrain.config.common import DomainConfig
from posttrain.core.errors import ConfigError
from posttrain.domains.reasoning_gym import source as rg
from posttrain.domains.reasoning_gym.mixture import GymSource
from posttrain.tasks.mixture import jsonl_source, Mixture, build_mixture

# A small problem space (two 1-2 digit terms): questions repeat across seeds, so held-out
# eval questions really do turn up among the training seeds and must be skipped.
SMALL = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2}


def jsonl(tmp_path, name: str, n: int) -> str:
    p = tmp_path / f"{name}.jsonl"
    p.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"{name} {i}?", "answer": str(i)}) + "\n"
                         for i in range(n)), encoding="utf-8")
    return str(p)


def ids(tasks) -> list[str]:
    return [t.id for t in tasks]


def seed_of(task) -> int:
    return int(task.id.rsplit("/", 1)[1])


# ---------------------------------------------------------------- reasoning-gym source


def test_gym_source_skips_held_out_questions():
    src = GymSource("chain_sum", SMALL, task_seed=0, n_eval=16)
    held = {t.reference["question"] for t in rg.make_tasks("chain_sum", rg.HOLDOUT, rg.EVAL_SEED_START)}
    held |= {t.reference["question"] for t in rg.make_tasks("chain_sum", rg.HOLDOUT, rg.EVAL_SEED_START, config=SMALL)}
    first = src.take(40)
    second = src.take(40)
    tasks = first + second
    assert len(tasks) == 80 and len(set(ids(tasks))) == 80
    assert not any(t.reference["question"] in held for t in tasks)
    seeds = [seed_of(t) for t in tasks]
    assert seeds == sorted(seeds) and max(seeds) < rg.EVAL_SEED_START
    # the cursor counts raw items, skipped ones included: some were skipped here
    assert src.cursor > 80 and src.cursor == seeds[-1] + 1
    skipped = set(range(seeds[-1] + 1)) - set(seeds)
    raw = rg.make_tasks("chain_sum", seeds[-1] + 1, 0, config=SMALL)
    assert skipped and all(raw[s].reference["question"] in held for s in skipped)  # only held-out ones
    # eval tasks: the first items from the eval seed, with the source's options, all held out of training
    ev = src.eval_tasks()
    assert ids(ev) == [f"chain_sum/{rg.EVAL_SEED_START + i}" for i in range(16)]
    assert all(t.reference["question"] in held for t in ev)
    assert GymSource("chain_sum", SMALL, task_seed=0, n_eval=0).eval_tasks() == []


def test_gym_source_never_reaches_eval_seeds():
    src = GymSource("chain_sum", {}, task_seed=rg.EVAL_SEED_START - 100, n_eval=0)
    got = src.take(60)
    assert all(seed_of(t) < rg.EVAL_SEED_START for t in got)
    with pytest.raises(ConfigError, match="training items ran into the eval seeds"):
        src.take(60)


def test_unknown_gym_domain_lists_valid_names():
    with pytest.raises(ConfigError) as e:
        build_mixture([DomainConfig(name="chain_sums")], task_seed=0, seed=0)
    assert "unknown task domain 'chain_sums'" in str(e.value)
    assert "did you mean chain_sum" in str(e.value)


# ---------------------------------------------------------------- JSONL source


def test_jsonl_source_reshuffles_each_pass_and_holds_out_the_tail(tmp_path):
    src = jsonl_source("qa", jsonl(tmp_path, "qa", 12), seed=3, n_eval=2)
    assert ids(src.eval_tasks()) == ["qa/q10", "qa/q11"]
    train = {f"qa/q{i}" for i in range(10)}
    passes = [ids(src.take(10)) for _ in range(4)]
    for p in passes:
        assert sorted(p) == sorted(train)  # each pass is a permutation of the training lines
    assert len({tuple(p) for p in passes}) == 4  # and a different one every time
    assert src.cursor == 40
    # a take that straddles a pass boundary continues in the next pass's order
    again = jsonl_source("qa", jsonl(tmp_path, "qa", 12), seed=3, n_eval=2)
    assert ids(again.take(7)) + ids(again.take(7)) == (passes[0] + passes[1])[:14]
    other_seed = jsonl_source("qa", jsonl(tmp_path, "qa", 12), seed=4, n_eval=2)
    assert ids(other_seed.take(10)) != passes[0]


def test_jsonl_source_shuffles_once_per_pass(tmp_path, monkeypatch):
    import posttrain.tasks.mixture as mixture

    made = []

    class Counting(mixture.random.Random):
        def __init__(self, seed):
            made.append(seed)
            super().__init__(seed)

    monkeypatch.setattr(mixture.random, "Random", Counting)
    src = jsonl_source("qa", jsonl(tmp_path, "qa", 10), seed=0, n_eval=0)
    src.take(25)  # passes 0, 1 and half of 2
    src.take(5)
    assert len(made) == 3  # (a shuffle per task made a 100k-line file cost seconds per step)


def test_jsonl_source_without_eval_and_too_small(tmp_path):
    path = jsonl(tmp_path, "qa", 3)
    src = jsonl_source("qa", path, seed=0, n_eval=0)
    assert src.eval_tasks() == [] and sorted(ids(src.take(3))) == ["qa/q0", "qa/q1", "qa/q2"]
    with pytest.raises(ConfigError, match=r"'qa': .*qa.jsonl has 3 tasks, too few to hold out eval_tasks=3"):
        jsonl_source("qa", path, seed=0, n_eval=3)


# ---------------------------------------------------------------- mixture


def two_domain_mixture(tmp_path, seed=0):
    return build_mixture(
        [DomainConfig(name="chain_sum", options=SMALL, weight=1.0, eval_tasks=4),
         DomainConfig(name="qa", path=jsonl(tmp_path, "qa", 9), weight=2.0, eval_tasks=2)],
        task_seed=0, seed=seed,
    )


def test_state_round_trip_gives_the_same_next_tasks(tmp_path):
    a = two_domain_mixture(tmp_path)
    for step in range(3):
        a.sample(6, step=step)
    state = json.loads(json.dumps(a.state_dict()))  # what a checkpoint stores
    assert state["chain_sum"]["cursor"] > 0 and state["qa"]["cursor"] > 0
    b = two_domain_mixture(tmp_path)
    b.load_state_dict(state)
    fresh = two_domain_mixture(tmp_path)
    later_a = [ids(a.sample(6, step=s)) for s in range(3, 8)]
    later_b = [ids(b.sample(6, step=s)) for s in range(3, 8)]
    later_fresh = [ids(fresh.sample(6, step=s)) for s in range(3, 8)]
    assert later_a == later_b
    assert later_a != later_fresh  # without the cursors the tasks would repeat


def test_missing_cursor_is_config_error(tmp_path):
    mix = two_domain_mixture(tmp_path)
    with pytest.raises(ConfigError, match="no cursor for domain 'qa'"):
        mix.load_state_dict({"chain_sum": {"cursor": 5}})


def test_domain_draws_depend_only_on_seed_step_attempt(tmp_path):
    domains = lambda m, **kw: [t.domain for t in m.sample(8, **kw)]  # noqa: E731
    a, b = two_domain_mixture(tmp_path), two_domain_mixture(tmp_path)
    for step in range(4):  # a has handed out tasks before, b has not: the draw does not care
        a.sample(5, step=step)
    assert domains(a, step=9, attempt=1) == domains(b, step=9, attempt=1)
    retries = {tuple(domains(two_domain_mixture(tmp_path), step=9, attempt=k)) for k in range(6)}
    assert len(retries) > 1  # a retry of a step draws again
    seed0, seed1 = two_domain_mixture(tmp_path, seed=0), two_domain_mixture(tmp_path, seed=1)
    assert [domains(seed0, step=s) for s in range(6)] != [domains(seed1, step=s) for s in range(6)]


def test_sample_follows_weights(tmp_path):
    mix = Mixture([jsonl_source("a", jsonl(tmp_path, "a", 50), 0, 0), jsonl_source("b", jsonl(tmp_path, "b", 50), 0, 0)],
                  [3.0, 1.0], seed=7)
    counts = Counter()
    for step in range(100):
        tasks = mix.sample(20, step=step)
        assert len(tasks) == 20
        counts.update(t.domain for t in tasks)
    assert sum(counts.values()) == 2000
    assert counts["a"] / 2000 == pytest.approx(0.75, abs=0.05)
    assert mix.state_dict() == {"a": {"cursor": counts["a"]}, "b": {"cursor": counts["b"]}}


def test_empty_mixture_is_config_error():
    with pytest.raises(ConfigError, match="the mixture is empty"):
        Mixture([], [], seed=0)


def test_domain_verifiers_override_what_tasks_name():
    from posttrain.config.common import DomainConfig
    from posttrain.core.errors import ConfigError
    from posttrain.tasks.mixture import build_mixture

    opts = {"max_terms": 3, "max_digits": 2}
    mix = build_mixture([DomainConfig(name="basic_arithmetic", options=opts, verifiers=["numeric"], eval_tasks=3)],
                        task_seed=500_000, seed=0)
    plain = build_mixture([DomainConfig(name="basic_arithmetic", options=opts, eval_tasks=3)], task_seed=500_000, seed=0)
    got, want = mix.sample(4, step=0), plain.sample(4, step=0)
    assert [t.id for t in got] == [t.id for t in want]  # same tasks, same cursor
    assert {t.verifiers for t in got} == {("numeric",)} and {t.verifiers for t in want} == {("reasoning_gym",)}
    assert {t.verifiers for t in mix.sources[0].eval_tasks()} == {("numeric",)}
    assert mix.state_dict() == plain.state_dict()
    with pytest.raises(ConfigError, match="unknown verifier 'numerc'"):
        build_mixture([DomainConfig(name="chain_sum", verifiers=["numerc"])], task_seed=500_000, seed=0)


def test_eval_tasks_beyond_the_holdout_are_refused():
    from posttrain.config.common import DomainConfig
    from posttrain.core.errors import ConfigError
    from posttrain.tasks.mixture import build_mixture
    from posttrain.domains.reasoning_gym.source import HOLDOUT

    with pytest.raises(ConfigError, match="eval_tasks=60 exceeds the 50 held-out"):
        build_mixture([DomainConfig(name="basic_arithmetic", eval_tasks=60, holdout=50)], task_seed=500_000, seed=0)
    # without an explicit holdout, the held-out range grows to cover every eval item
    mix = build_mixture([DomainConfig(name="basic_arithmetic", eval_tasks=HOLDOUT + 1)], task_seed=500_000, seed=0)
    assert mix.sources[0].holdout == HOLDOUT + 1
    evals = {t.reference["question"] for t in mix.sources[0].eval_tasks()}
    assert not evals & {t.reference["question"] for t in mix.sources[0].take(200)}


def test_domain_verifier_options_and_combine_rule_reach_every_task_and_its_score():
    from posttrain.config.common import DomainConfig
    from posttrain.tasks.mixture import build_mixture
    from posttrain.core.types import Score
    from posttrain.verifiers import task_score, verifier_options

    d = DomainConfig(name="chain_sum", verifiers=["numeric", "exact"], eval_tasks=2, combine="all",
                     verifier_options={"numeric": {"rel_tol": 0.01}})
    mix = build_mixture([d], task_seed=500_000, seed=0)
    for task in mix.sample(3, step=0) + mix.sources[0].eval_tasks():
        assert task.verifiers == ("numeric", "exact")
        assert verifier_options(task, "numeric") == {"rel_tol": 0.01} and verifier_options(task, "exact") == {}
        split = [Score(1.0, "numeric"), Score(0.0, "exact")]
        assert task_score(split, task) == 0.0  # all: one verifier failing fails the task
    mean_task = build_mixture([DomainConfig(name="chain_sum", eval_tasks=2)], task_seed=500_000, seed=0).sample(1, 0)[0]
    assert task_score([Score(1.0, "numeric"), Score(0.0, "exact")], mean_task) == 0.5


def test_domain_verifier_thresholds_reach_every_task_and_change_its_verdict(tmp_path):
    from posttrain.tasks.mixture import Rescored
    from posttrain.core.types import Score
    from posttrain.verifiers import task_score

    d = DomainConfig(name="chain_sum", verifiers=["numeric", "math"], combine="majority", eval_tasks=2,
                     verifier_thresholds={"math": 0.7})
    mix = build_mixture([d], task_seed=500_000, seed=0)
    assert isinstance(mix.sources[0], Rescored)  # thresholds alone make the domain rescored
    tasks = mix.sample(3, step=0) + mix.sources[0].eval_tasks()
    assert len(tasks) == 5
    for task in tasks:
        assert task.metadata["verifier_thresholds"] == {"math": 0.7} and task.metadata["combine"] == "majority"
        # majority of 2 needs both: math 0.6 < 0.7 fails the task, 0.75 passes it
        assert task_score([Score(1.0, "numeric"), Score(0.6, "math")], task) == 0.0
        assert task_score([Score(1.0, "numeric"), Score(0.75, "math")], task) == 1.0
    # a JSONL task's own thresholds are kept for other verifiers, the domain's win for the same one
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"{i}?", "answer": str(i),
                                     "metadata": {"verifier_thresholds": {"exact": 0.2, "math": 0.1}}}) + "\n"
                         for i in range(3)))
    jmix = build_mixture([DomainConfig(name="j", path=str(p), eval_tasks=0, verifier_thresholds={"math": 0.9})],
                         task_seed=500_000, seed=0)
    (t,) = jmix.sample(1, step=0)
    assert t.metadata["verifier_thresholds"] == {"exact": 0.2, "math": 0.9}


def test_bad_domain_thresholds_fail_when_the_mixture_is_built():
    from posttrain.tasks.mixture import Rescored

    source = GymSource("chain_sum", {}, 500_000, 0)
    with pytest.raises(ConfigError) as e:
        Rescored(source, None, thresholds={"mathh": 0.7})
    assert str(e.value).startswith("domain 'chain_sum': verifier_thresholds: threshold for a verifier that is "
                                   "not registered: unknown verifier 'mathh' (did you mean math?); known: ")
    with pytest.raises(ConfigError, match=r"^domain 'chain_sum': verifier_thresholds: threshold 'math' must be "
                                          r"a number in \[0, 1\], got 7$"):
        Rescored(source, None, thresholds={"math": 7})
    # a config mutated past validation is checked again at build time
    d = DomainConfig.model_construct(**{**DomainConfig(name="chain_sum").model_dump(), "verifier_thresholds": {"x": 1}})
    with pytest.raises(ConfigError, match="unknown verifier 'x'"):
        build_mixture([d], task_seed=500_000, seed=0)


TINY = {"min_terms": 2, "max_terms": 2, "max_digits": 1}  # 200 possible chain_sum questions


def test_holdout_that_uses_up_a_small_question_space_is_a_config_error_when_set_and_fitted_by_default():
    # the first 1000 eval items hold 199 of the 200 questions: training would see one question
    with pytest.raises(ConfigError, match=r"'chain_sum': only 1 distinct training question.*set a smaller holdout"):
        GymSource("chain_sum", TINY, 500_000, 8, holdout=1000)  # the user's own holdout is never overridden
    fitted = GymSource("chain_sum", TINY, 500_000, 8)  # the default shrinks to fit, never below the scored 8
    assert 8 <= fitted.holdout < 1000
    assert len({t.reference["question"] for t in fitted.take(100)}) >= 16
    with pytest.raises(ConfigError, match="only 1 distinct training question"):
        rg.training_tasks("chain_sum", 40, 0, config=TINY)


def test_smaller_holdout_trains_on_many_questions_none_of_them_scored():
    src = build_mixture([DomainConfig(name="chain_sum", options=TINY, eval_tasks=100, holdout=200)], seed=0,
                        task_seed=500_000).sources[0]
    taken = [t.reference["question"] for t in src.take(300)]
    scored = {t.reference["question"] for t in rg.make_tasks("chain_sum", 200, rg.EVAL_SEED_START, config=TINY)}
    assert len(set(taken)) >= 50 and not set(taken) & scored
    assert {t.reference["question"] for t in src.eval_tasks()} <= scored
    with pytest.raises(ConfigError, match="eval_tasks=100 exceeds the 50 held-out"):
        GymSource("chain_sum", TINY, 500_000, 100, holdout=50)
