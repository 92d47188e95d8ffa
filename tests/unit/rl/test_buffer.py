"""ReplayBuffer: eviction (global, per-domain), min_score, distinct-task sampling, exact save/load, bad files."""

from __future__ import annotations

import json
import os
import random

import pytest

import posttrain.core.fsio as fsio
from posttrain.rl.buffer import replay_plan, ENTRIES_FILE, SUMMARY_FILE, Entry, ReplayBuffer
from posttrain.core.errors import CheckpointError
from posttrain.core.types import Limits, Score, Task, Trajectory


def task(tid: str, domain: str = "arith") -> Task:
    # reasoning-gym style reference: tuples and nested dicts that JSON would not round-trip
    return Task(
        id=tid,
        domain=domain,
        prompt=({"role": "user", "content": f"solve {tid}"},),
        reference={"answer": (1, 2), "meta": {"pairs": [(3, "x"), (4, None)], "f": 0.1}},
        verifiers=("exact",),
        limits=Limits(max_new_tokens=8),
        metadata={"source": "rg", "idx": (7,)},
    )


def traj(tid: str, k: int = 0, version: int = 0) -> Trajectory:
    return Trajectory(
        task_id=tid,
        token_ids=(1, 2, 3, 4 + k),
        loss_mask=(0, 0, 1, 1),
        logprobs=(0.0, 0.0, -0.125 - k, -1.0 / 3.0),
        prompt_len=2,
        text=f"answer {k}",
        policy_version=version,
        scores=(Score(1.0, "exact", {"parsed": (k,)}),),
        reward=1.0,
        timings={"rollout": 0.5},
    )


def add(buf: ReplayBuffer, tid: str, domain: str = "arith", score: float = 1.0, step: int = 0, k: int = 0) -> bool:
    return buf.add(task(tid, domain), traj(tid, k, step), score, step)


def ids(entries) -> list[str]:
    return [e.task.id for e in entries]


# ---------------------------------------------------------------- arguments


@pytest.mark.parametrize(
    "kwargs, word",
    [
        ({"capacity": 0}, "capacity"),
        ({"capacity": -3}, "capacity"),
        ({"capacity": 2.5}, "capacity"),
        ({"capacity": True}, "capacity"),
        ({"capacity": 4, "per_domain_quota": 0}, "per_domain_quota"),
        ({"capacity": 4, "min_score": -0.1}, "min_score"),
        ({"capacity": 4, "min_score": 1.5}, "min_score"),
        ({"capacity": 4, "min_score": float("nan")}, "min_score"),
    ],
)
def test_bad_constructor_arguments(kwargs, word):
    with pytest.raises(ValueError, match=word):
        ReplayBuffer(**kwargs)


def test_bad_add_and_sample_arguments():
    buf = ReplayBuffer(4)
    with pytest.raises(ValueError, match="n must be"):
        buf.sample(-1, random.Random(0))
    with pytest.raises(ValueError, match="task_id"):
        buf.add(task("a"), traj("b"), 1.0, 0)
    with pytest.raises(ValueError, match="step"):
        buf.add(task("a"), traj("a"), 1.0, -1)
    with pytest.raises(ValueError, match="score"):
        buf.add(task("a"), traj("a"), None, 0)
    assert len(buf) == 0 and buf.sample(0, random.Random(0)) == []


# ---------------------------------------------------------------- adding and evicting


def test_global_eviction_is_oldest_first():
    buf = ReplayBuffer(3)
    for i, dom in enumerate(["a", "b", "a", "c", "b"]):
        assert add(buf, f"t{i}", dom, step=i)
    assert ids(buf.entries()) == ["t2", "t3", "t4"]
    assert [e.step for e in buf.entries()] == [2, 3, 4]
    assert buf.domain_counts() == {"a": 1, "b": 1, "c": 1}
    s = buf.state_summary()
    assert (s["size"], s["added"], s["evicted"], s["rejected"]) == (3, 5, 2, 0)
    assert (s["oldest_step"], s["newest_step"]) == (2, 4)


def test_domain_at_quota_evicts_its_own_oldest():
    buf = ReplayBuffer(10, per_domain_quota=2)
    for tid, dom in [("a1", "a"), ("b1", "b"), ("a2", "a"), ("a3", "a"), ("b2", "b"), ("a4", "a")]:
        add(buf, tid, dom)
    # a1 then a2 left to make room for a3, a4; b1 (older than both) stays
    assert ids(buf.entries()) == ["b1", "a3", "b2", "a4"]
    assert buf.domain_counts() == {"a": 2, "b": 2}
    assert buf.state_summary()["evicted"] == 2


def test_full_buffer_below_quota_evicts_globally_oldest():
    buf = ReplayBuffer(3, per_domain_quota=2)
    for tid, dom in [("a1", "a"), ("a2", "a"), ("b1", "b"), ("c1", "c")]:
        add(buf, tid, dom)
    # c is below its quota, the buffer is full: the oldest overall (a1) goes
    assert ids(buf.entries()) == ["a2", "b1", "c1"]
    add(buf, "b2", "b")  # b below quota, buffer full -> a2 goes
    assert ids(buf.entries()) == ["b1", "c1", "b2"]
    add(buf, "b3", "b")  # b at quota -> b1 goes, not the global oldest (also b1 here) ...
    add(buf, "b4", "b")  # ... and now b2 goes although c1 is older
    assert ids(buf.entries()) == ["c1", "b3", "b4"]
    assert buf.domain_counts() == {"b": 2, "c": 1}


def test_min_score_filter_keeps_lower_quality_successes():
    strict = ReplayBuffer(10)  # default min_score 1.0: only perfect scores
    assert add(strict, "x", score=1.0) and not add(strict, "y", score=0.999)
    assert ids(strict.entries()) == ["x"]
    loose = ReplayBuffer(10, min_score=0.5)
    kept = [add(loose, f"t{i}", score=s) for i, s in enumerate([0.5, 0.7, 0.49, 1.0, 0.0, float("nan")])]
    assert kept == [True, True, False, True, False, False]
    assert [e.score for e in loose.entries()] == [0.5, 0.7, 1.0]
    assert loose.state_summary()["rejected"] == 3
    # same task kept twice (no dedup by quality)
    assert add(loose, "t0", score=0.6, k=1) and ids(loose.entries()).count("t0") == 2


# ---------------------------------------------------------------- sampling


def test_sample_distinct_tasks_and_exclusion():
    buf = ReplayBuffer(50)
    for i in range(12):
        add(buf, f"t{i % 4}", step=i, k=i)  # 4 tasks, 3 entries each
    rng = random.Random(0)
    for n in (1, 3, 4, 10):
        got = one(buf.sample(n, rng))
        assert len(got) == min(n, 4) and len(set(ids(got))) == len(got)
        assert all(isinstance(e, Entry) for e in got)
    for _ in range(20):
        got = one(buf.sample(4, rng, exclude_task_ids={"t1", "t3"}))
        assert sorted(ids(got)) == ["t0", "t2"]
    assert buf.sample(4, rng, exclude_task_ids=["t0", "t1", "t2", "t3"]) == []


def test_sample_is_uniform_over_tasks_then_entries():
    buf = ReplayBuffer(10)
    for k in range(3):
        add(buf, "many", k=k)
    add(buf, "one")
    rng = random.Random(1)
    draws = [buf.sample(1, rng)[0][0] for _ in range(4000)]
    share_many = sum(e.task.id == "many" for e in draws) / len(draws)
    assert 0.46 < share_many < 0.54  # per task, not per entry (that would be 0.75)
    ks = [e.trajectory.token_ids[-1] - 4 for e in draws if e.task.id == "many"]
    assert all(abs(ks.count(k) / len(ks) - 1 / 3) < 0.05 for k in range(3))


def test_sample_is_deterministic_given_rng_state():
    buf = ReplayBuffer(20)
    for i in range(15):
        add(buf, f"t{i % 9}", f"d{i % 3}", step=i, k=i)
    a, b = random.Random(123), random.Random(123)
    for n in (5, 2, 9):
        assert buf.sample(n, a, exclude_task_ids={"t4"}) == buf.sample(n, b, exclude_task_ids={"t4"})
    assert a.getstate() == b.getstate()
    assert buf.sample(5, random.Random(1)) != buf.sample(5, random.Random(2))


def test_sample_several_distinct_entries_per_task():
    buf = ReplayBuffer(50)
    for k in range(5):
        add(buf, "five", step=k, k=k)
    for k in range(2):
        add(buf, "two", step=k, k=10 + k)
    got = {entries[0].task.id: entries for entries in buf.sample(2, random.Random(3), per_task=3)}
    assert sorted(got) == ["five", "two"]
    assert len(got["five"]) == 3 and len(got["two"]) == 2  # up to per_task, never one entry twice
    assert len({e.trajectory.token_ids for e in got["five"]}) == 3
    assert all(e.task.id == "five" for e in got["five"])
    with pytest.raises(ValueError, match="per_task"):
        buf.sample(1, random.Random(0), per_task=0)


def test_replay_plan_counts_trajectories_not_groups():
    assert replay_plan(0.3, 16, 8) == (38, 4)  # 38 of 128 trajectories; replay groups hold <= 4 stored
    assert replay_plan(0.5, 16, 8) == (64, 4)  # every group half stored: the most this placement allows
    assert replay_plan(0.0, 16, 8) == (0, 4)
    assert replay_plan(0.3, 4, 3) == (4, 1)
    with pytest.raises(ValueError, match=r"replay_ratio must be in \[0, 0.5\]"):
        replay_plan(0.6, 16, 8)


def test_mean_age_and_summary():
    buf = ReplayBuffer(5)
    assert buf.mean_age(10) == 0.0
    add(buf, "a", step=2)
    add(buf, "b", "g", step=6)
    assert buf.mean_age(10) == pytest.approx(6.0)
    s = buf.state_summary()
    assert s["domains"] == {"arith": 1, "g": 1} and s["tasks"] == 2 and s["capacity"] == 5
    json.dumps(s)


# ---------------------------------------------------------------- persistence


OPS = [("add", f"t{i % 7}", f"d{i % 3}", [1.0, 0.6, 0.3][i % 3], i) for i in range(40)]


def one(drawn):
    """The first entry of each drawn task (the sample() of per_task=1)."""
    assert all(len(entries) == 1 for entries in drawn)
    return [entries[0] for entries in drawn]


def run_ops(buf: ReplayBuffer, ops, rng: random.Random) -> list:
    """Apply adds; every 5th op also samples (the sample is recorded)."""
    log = []
    for j, (_, tid, dom, score, step) in enumerate(ops):
        log.append(add(buf, tid, dom, score=score, step=step, k=step))
        if j % 5 == 4:
            log.append(ids(one(buf.sample(3, rng, exclude_task_ids={tid}))))
    return log


def test_save_load_round_trip_is_exact(tmp_path):
    def make():
        return ReplayBuffer(8, per_domain_quota=4, min_score=0.5)

    plain, saved = make(), make()
    rng_a, rng_b = random.Random(5), random.Random(5)
    assert run_ops(plain, OPS[:20], rng_a) == run_ops(saved, OPS[:20], rng_b)
    saved.save(tmp_path / "buf")
    loaded = ReplayBuffer.load(tmp_path / "buf")
    assert loaded.entries() == plain.entries() and repr(loaded.entries()) == repr(plain.entries())
    ref = loaded.entries()[0].task.reference
    assert isinstance(ref["answer"], tuple) and isinstance(ref["meta"]["pairs"][0], tuple)
    assert isinstance(loaded.entries()[0].task.prompt, tuple)
    assert loaded.state_summary() == plain.state_summary()
    assert (loaded.capacity, loaded.per_domain_quota, loaded.min_score) == (8, 4, 0.5)
    # the rest of the sequence (evictions on both rules, samples) behaves identically
    assert run_ops(plain, OPS[20:], rng_a) == run_ops(loaded, OPS[20:], rng_b)
    assert loaded.entries() == plain.entries() and loaded.state_summary() == plain.state_summary()
    assert plain.state_summary()["evicted"] > 0
    assert loaded.sample(8, random.Random(9)) == plain.sample(8, random.Random(9))


def test_summary_json_and_empty_round_trip(tmp_path):
    buf = ReplayBuffer(4, per_domain_quota=3)
    buf.save(tmp_path)
    assert len(ReplayBuffer.load(tmp_path)) == 0
    add(buf, "a", "x", step=3)
    add(buf, "b", "y", step=7)
    buf.save(tmp_path)
    s = json.loads((tmp_path / SUMMARY_FILE).read_text())
    assert s["capacity"] == 4 and s["size"] == 2 and s["domains"] == {"x": 1, "y": 1}
    assert (s["oldest_step"], s["newest_step"]) == (3, 7)
    assert sorted(os.listdir(tmp_path)) == [ENTRIES_FILE, SUMMARY_FILE]


def _saved(tmp_path) -> ReplayBuffer:
    buf = ReplayBuffer(6)
    for i in range(4):
        add(buf, f"t{i}", step=i)
    buf.save(tmp_path)
    return buf


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda b: b[:-10], "truncated"),
        (lambda b: b[:40], "truncated"),
        (lambda b: b[:60] + bytes([b[60] ^ 1]) + b[61:], "checksum"),
        (lambda b: b"garbage" + b, "bad header"),
        (lambda b: b"", "bad header"),
    ],
)
def test_corrupt_entries_file_raises_checkpoint_error(tmp_path, damage, message):
    _saved(tmp_path)
    path = tmp_path / ENTRIES_FILE
    path.write_bytes(damage(path.read_bytes()))
    before, mtime = path.read_bytes(), path.stat().st_mtime_ns
    with pytest.raises(CheckpointError, match=message) as err:
        ReplayBuffer.load(tmp_path)
    assert str(path) in str(err.value)
    assert path.read_bytes() == before and path.stat().st_mtime_ns == mtime  # load never writes


def _forge(path, body: bytes) -> None:
    """A file with a valid header and checksum around an arbitrary body."""
    import hashlib

    path.write_bytes(fsio._MAGIC + body + b"sha256:" + hashlib.sha256(body).hexdigest().encode())


def test_well_formed_file_with_bad_content_raises(tmp_path):
    import pickle

    path = tmp_path / ENTRIES_FILE
    _forge(path, b"not a pickle")
    with pytest.raises(CheckpointError, match="unpickled"):
        ReplayBuffer.load(tmp_path)
    _forge(path, pickle.dumps([1, 2]))
    with pytest.raises(CheckpointError, match="malformed"):
        ReplayBuffer.load(tmp_path)
    stats = {"added": 2, "rejected": 0, "evicted": 0}
    good = {"capacity": 1, "per_domain_quota": None, "min_score": 1.0, "stats": stats}
    two = [(task("a"), traj("a"), 1.0, 0), (task("b"), traj("b"), 1.0, 1)]
    _forge(path, pickle.dumps({**good, "entries": two}))  # more entries than capacity
    with pytest.raises(CheckpointError, match="malformed.*at most 1"):
        ReplayBuffer.load(tmp_path)
    _forge(path, pickle.dumps({**good, "capacity": 0, "entries": []}))
    with pytest.raises(CheckpointError, match="malformed.*capacity"):
        ReplayBuffer.load(tmp_path)


def test_missing_file_raises_checkpoint_error(tmp_path):
    with pytest.raises(CheckpointError, match=f"{ENTRIES_FILE} is missing"):
        ReplayBuffer.load(tmp_path / "nowhere")
    assert not (tmp_path / "nowhere").exists()


def test_failed_save_leaves_previous_buffer_intact(tmp_path, monkeypatch):
    old = _saved(tmp_path)
    old_bytes = (tmp_path / ENTRIES_FILE).read_bytes()
    newer = ReplayBuffer(6)
    for i in range(6):
        add(newer, f"n{i}", step=10 + i)

    def half_then_fail(self, data):
        self.f.write(bytes(data)[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fsio._HashingWriter, "write", half_then_fail)
    with pytest.raises(CheckpointError, match="No space left"):
        newer.save(tmp_path)
    monkeypatch.undo()
    assert (tmp_path / ENTRIES_FILE).read_bytes() == old_bytes
    assert sorted(os.listdir(tmp_path)) == [ENTRIES_FILE, SUMMARY_FILE]  # no temp file left behind
    assert ReplayBuffer.load(tmp_path).entries() == old.entries()
    newer.save(tmp_path)  # and a later save works
    assert ReplayBuffer.load(tmp_path).entries() == newer.entries()


def test_seeded_from_another_run_rebases_steps_and_versions(tmp_path):
    src = ReplayBuffer(10)
    for i in range(4):
        add(src, f"t{i}", step=5 + i, k=i)
    add(src, "low", score=0.2, step=9)  # rejected by min_score 1.0 in src already
    src.save(tmp_path / "src")
    buf = ReplayBuffer(3, min_score=1.0).seeded_from(tmp_path / "src")
    assert [e.task.id for e in buf.entries()] == ["t1", "t2", "t3"]  # capacity 3: the oldest evicted
    assert [e.step for e in buf.entries()] == [-3, -2, -1]
    assert buf.mean_age(0) == pytest.approx(2.0)
    with pytest.raises(CheckpointError, match="missing"):
        ReplayBuffer(3).seeded_from(tmp_path / "nowhere")
    assert [e.trajectory.policy_version for e in buf.entries()] == [-3, -2, -1]
