"""Building reasoning-gym items at scale: a raising generator is skipped and counted, held-out sets are
sized by a time budget and cached on disk, the build is reported, rewards mean correct."""

from __future__ import annotations

import pytest

from posttrain.core.errors import ConfigError
from posttrain.domains.reasoning_gym import source as rg
from posttrain.domains.reasoning_gym import build as rg_build
from posttrain.domains.reasoning_gym import scorers as rg_scorers
MAZE_BAD = 1_000_939  # reasoning-gym 0.1.19's maze raises RuntimeError for this item (and 1_000_981)


@pytest.fixture(autouse=True)
def fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("POSTTRAIN_RG_CACHE", str(tmp_path / "cache"))
    rg_build.reset()
    yield
    rg_build.reset()


def test_maze_generator_really_raises_for_that_seed():
    ds = rg._dataset("maze", MAZE_BAD, 1, rg._config_key("maze", None))
    with pytest.raises(RuntimeError):
        ds[0]


def test_raising_item_is_skipped_counted_once_and_the_next_seed_taken():
    tasks = rg.make_tasks("maze", 50, 1_000_900)
    ids = [t.id for t in tasks]
    assert len(tasks) == 50 and f"maze/{MAZE_BAD}" not in ids
    assert ids[-1] == "maze/1000950" and ids[38] == "maze/1000938" and ids[39] == "maze/1000940"
    assert [t.metadata["index"] for t in tasks][38:41] == [38, 40, 41]
    assert rg.skipped_items() == {"maze": 1}
    again = rg.make_tasks("maze", 50, 1_000_900)  # deterministic, and the same item is not counted twice
    assert [t.id for t in again] == ids and [t.reference["question"] for t in again] == [t.reference["question"] for t in tasks]
    assert rg.skipped_items() == {"maze": 1}
    gold = rg.gold_answer(tasks[45])  # a task past the skipped one scores like any other
    assert rg.score(tasks[45], f"Answer: {gold}") == 1.0


def test_skip_at_the_end_of_a_dataset_grows_it_keeping_the_items():
    tasks = rg.make_tasks("maze", 40, 1_000_900)  # the 40th item raises: the 41st seed fills it
    assert tasks[-1].id == "maze/1000940" and len(tasks) == 40
    def qa(task):
        return task.reference["question"], task.reference["answer"]

    assert qa(tasks[-1]) == qa(rg.make_tasks("maze", 1, 1_000_940)[0])  # the grown dataset's item = that seed's
    assert [qa(t) for t in tasks[:5]] == [qa(t) for t in rg.make_tasks("maze", 5, 1_000_900)]
    assert rg.build_report()["maze"]["skipped"] == 1


def test_a_domain_whose_every_item_raises_is_one_config_error(monkeypatch):
    class Broken:
        def __getitem__(self, i):
            raise RuntimeError("generator bug")

    monkeypatch.setattr(rg, "_dataset", lambda *a: Broken())
    with pytest.raises(ConfigError, match=r"'maze': 64 items in a row failed to generate .*generator bug") as e:
        rg.make_tasks("maze", 3, 100)
    assert "\n" not in str(e.value)


def test_held_out_questions_skip_the_bad_item_and_come_from_the_disk_cache_warm():
    key = rg._config_key("maze", None)
    cold = rg.held_out_questions("maze", key, 990)  # EVAL_SEED_START + 939 and + 981 raise
    assert len(cold) == len({t.reference["question"] for t in rg.make_tasks("maze", 990, rg.EVAL_SEED_START)})
    path = rg_build.cache_path("maze", key, 990)
    assert path is not None and path.exists()
    assert rg.build_report()["maze"]["skipped"] == 2 and rg.build_report()["maze"]["cached"] == 0
    rg_build.reset()
    warm = rg.held_out_questions("maze", key, 990)
    report = rg.build_report()["maze"]
    assert warm == cold and report["items"] == 0 and report["cached"] == 990 and report["skipped"] == 2


def test_a_corrupt_cache_file_is_rebuilt():
    key = rg._config_key("chain_sum", None)
    first = rg.held_out_questions("chain_sum", key, 30)
    path = rg_build.cache_path("chain_sum", key, 30)
    path.write_bytes(b"not gzip")
    rg_build.reset()
    assert rg.held_out_questions("chain_sum", key, 30) == first
    assert rg.build_report()["chain_sum"]["items"] == 30


def test_cache_off_writes_nothing(monkeypatch, tmp_path):
    monkeypatch.setenv("POSTTRAIN_RG_CACHE", "off")
    assert rg_build.cache_dir() is None
    rg.held_out_questions("chain_sum", rg._config_key("chain_sum", None), 20)
    assert not (tmp_path / "cache").exists()


def test_build_report_counts_items_and_time():
    rg.make_tasks("chain_sum", 25, 7)
    rg.make_tasks("leg_counting", 5, 7)
    report = rg.build_report()
    assert report["chain_sum"]["items"] == 25 and report["leg_counting"]["items"] == 5
    assert report["chain_sum"]["seconds"] >= 0 and report["chain_sum"]["skipped"] == 0


def test_holdout_size_fits_the_time_budget_from_checked_in_costs():
    for domain in rg.list_domains():
        size = rg.holdout_size(domain)
        assert size in rg.HOLDOUT_STEPS
        cost = rg_scorers.item_seconds(domain)
        assert size * cost <= rg.HOLDOUT_BUDGET_S or size == rg.HOLDOUT_STEPS[-1], domain
    assert rg.holdout_size("chain_sum") == rg.HOLDOUT == rg.holdout_size("basic_arithmetic")
    assert rg.holdout_size("knight_swap") < 200  # ~0.3 s an item


def _arith():
    """A basic_arithmetic task with a positive gold, and that gold negated (the brief's `-3` against `3`)."""
    task = next(t for t in rg.make_tasks("basic_arithmetic", 20, 3) if not str(rg.gold_answer(t)).startswith("-"))
    gold = str(rg.gold_answer(task))
    return task, gold, "-" + gold


def test_full_credit_domains_reward_only_full_marks():
    task, gold, wrong = _arith()
    assert rg_scorers.default_credit("basic_arithmetic") == "full" and rg.credit(task) == "full"
    assert rg.raw_score(task, f"Answer: {wrong}") > 0  # reasoning-gym's own partial credit
    assert rg.score(task, f"Answer: {wrong}") == 0.0
    assert rg.score(task, f"Answer: {gold}") == 1.0


def test_credit_option_keeps_partial_credit_and_a_bad_one_is_a_config_error():
    from dataclasses import replace

    task, _, wrong = _arith()
    partial = replace(task, metadata={**task.metadata, "verifier_options": {"reasoning_gym": {"credit": "partial"}}})
    assert rg.score(partial, f"Answer: {wrong}") == rg.raw_score(task, f"Answer: {wrong}") > 0
    bad = replace(task, metadata={**task.metadata, "verifier_options": {"reasoning_gym": {"credit": "some"}}})
    with pytest.raises(ConfigError, match="credit must be one of full, partial"):
        rg.score(bad, "Answer: 1")


def test_composite_items_follow_their_own_datasets_decision():
    tasks = rg.make_tasks("composite", 6, 0)
    for t in tasks:
        source = t.reference["metadata"]["source_dataset"]
        assert rg.credit(t) == rg_scorers.default_credit(source)


def test_the_quickstart_numeric_verifier_still_scores_arithmetic():
    from posttrain.core.types import Trajectory
    from posttrain.verifiers import get_verifier

    task, gold, wrong = _arith()
    numeric = get_verifier("numeric")

    def traj(text):
        return Trajectory(task_id=task.id, token_ids=(), loss_mask=(), logprobs=(), prompt_len=0, text=text)

    assert numeric(task, traj(f"Answer: {gold}")).value == 1.0
    assert numeric(task, traj(f"Answer: {wrong}")).value == 0.0


def test_a_domains_credit_option_in_the_config_reaches_its_tasks():
    from posttrain.config.common import DomainConfig
    from posttrain.tasks.mixture import build_mixture

    mix = build_mixture([DomainConfig(name="basic_arithmetic", eval_tasks=4, holdout=50,
                                      verifier_options={"reasoning_gym": {"credit": "partial"}}),
                         DomainConfig(name="chain_sum", eval_tasks=4, holdout=50)], task_seed=500_000, seed=0)
    arith, chain = mix.sources
    assert {rg.credit(t) for t in arith.eval_tasks() + arith.take(3)} == {"partial"}
    assert {rg.credit(t) for t in chain.eval_tasks() + chain.take(3)} == {"full"}


def test_codeio_items_are_built_in_a_scratch_dir_with_their_output_silenced(tmp_path, monkeypatch, capsys):
    """reasoning-gym's codeio runs code snippets that write files (planet.com, test_dir/) into the working
    directory and print: building its items must leave ours clean and our output quiet."""
    from posttrain.domains.reasoning_gym import source as rg
    class Noisy:
        def __getitem__(self, i):
            with open(f"written_{i}.txt", "w") as f:
                f.write("x")
            print("__init__ in StructureMeta called")
            return {"question": f"q{i}", "answer": "a", "metadata": {}}

    monkeypatch.setattr(rg, "_dataset", lambda *a, **k: Noisy())
    monkeypatch.chdir(tmp_path)
    size, items = rg._entries("codeio", 0, 3, "key")
    assert [e["question"] for _, e in items] == ["q0", "q1", "q2"]
    assert list(tmp_path.iterdir()) == [] and "StructureMeta" not in capsys.readouterr().out
    size, items = rg._entries("basic_arithmetic", 0, 1, "key")  # other domains run where they are
    assert (tmp_path / "written_0.txt").exists()
