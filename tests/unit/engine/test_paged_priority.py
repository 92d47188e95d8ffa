"""Request priority in the paged engine: admission highest priority first (FIFO within one, a
preempted sequence at the front of its priority), the preemption victim the lowest-priority
running sequence, and priority never changing a completion."""

from __future__ import annotations

from dataclasses import replace

import pytest

from posttrain.engine import SamplingParams
from posttrain.engine.paged import PagedEngine
from posttrain.engine.paged.cache import BlockAllocator
from posttrain.engine.paged.scheduler import Scheduler, Sequence
from tests.unit.engine.engine_checks import mixed_params, same


def engine(model, **options) -> PagedEngine:
    options.setdefault("block_size", 4)
    return PagedEngine.from_hf_model(model, device="cpu", **options)


@pytest.fixture(scope="module")
def model_and_prompts(sharp_model, prompts):
    return sharp_model, prompts


def test_priority_is_validated_and_left_out_of_equality():
    assert SamplingParams(seed=1, priority=5) == SamplingParams(seed=1)
    assert hash(SamplingParams(seed=1, priority=5)) == hash(SamplingParams(seed=1))
    assert replace(SamplingParams(), priority=-3).priority == -3
    for bad in (1.5, "high", True):
        with pytest.raises(ValueError, match="priority must be an int"):
            SamplingParams(priority=bad)


def test_queue_order_fifo_within_a_priority_and_preempted_first():
    sched = Scheduler(BlockAllocator(num_blocks=9, block_size=4), max_num_seqs=8, max_num_batched_tokens=64)
    seqs = {name: Sequence(i, [1, 2, 3], SamplingParams(temperature=0.0, priority=p), 0, i)
            for i, (name, p) in enumerate([("a0", 0), ("b2", 2), ("c1", 1), ("d2", 2), ("e0", 0), ("f1", 1)])}
    for s in seqs.values():
        sched.add(s)
    assert [s.request_id for s in sched.waiting] == [1, 3, 2, 5, 0, 4]  # b2 d2 c1 f1 a0 e0
    sched._preempt(Sequence(9, [1], SamplingParams(temperature=0.0, priority=1), 0, 9))
    assert [s.request_id for s in sched.waiting] == [1, 3, 9, 2, 5, 0, 4]  # front of priority 1
    sched.schedule()  # every one fits: admitted in that order, running kept in priority order
    assert [s.request_id for s in sched.running] == [1, 3, 9, 2, 5, 0, 4] and not sched.waiting
    late = Sequence(10, [1, 2], SamplingParams(temperature=0.0, priority=1), 0, 10)
    sched.add(late)
    sched.schedule()
    assert [s.request_id for s in sched.running] == [1, 3, 9, 2, 5, 10, 0, 4]  # last of priority 1


def test_one_slot_runs_the_most_urgent_first_with_identical_outputs(model_and_prompts):
    """max_num_seqs=1 and four waiting requests: they finish in priority order (FIFO among equals),
    each with the tokens it has at priority 0."""
    model, prompts = model_and_prompts
    base = mixed_params(4, max_tokens=10)
    priorities = [0, 2, 1, 2]
    eng = engine(model, max_num_seqs=1)
    ids = [eng.add_request(p, replace(sp, priority=pr)) for p, sp, pr in zip(prompts, base, priorities)]
    order, tokens = [], {rid: [] for rid in ids}
    while eng.has_unfinished():
        for out in eng.step():
            tokens[out.request_id] += out.token_ids
            if out.finished:
                order.append(ids.index(out.request_id))
    assert order == [1, 3, 2, 0]
    want = engine(model).generate(prompts, base)
    assert [tuple(tokens[rid]) for rid in ids] == [c.token_ids for c in want]
    fifo = engine(model, max_num_seqs=1)
    assert [c.token_ids for c in fifo.generate(prompts, base)] == [c.token_ids for c in want]


def test_the_victim_is_the_lowest_priority_running_sequence(model_and_prompts):
    """A cache too small for all eight requests at full length: at priority 0 the most recently
    admitted (the last, here) is preempted; at priority 1 it is never preempted and the others
    are; every output equals the big cache's."""
    model, prompts = model_and_prompts
    many = [prompts[i % 4] for i in range(8)]
    base = mixed_params(8, max_tokens=26)
    want = engine(model).generate(many, base)
    longest = -(-(max(len(p) for p in prompts) + 26) // 4)

    def run(last_priority: int):
        eng = engine(model, num_blocks=1 + longest + 6)
        victims: list[int] = []
        preempt = eng.scheduler._preempt

        def record(seq):
            victims.append(seq.request_id)
            preempt(seq)

        eng.scheduler._preempt = record
        params = base[:-1] + [replace(base[-1], priority=last_priority)]
        ids = [eng.add_request(p, sp) for p, sp in zip(many, params)]
        tokens = {rid: [] for rid in ids}
        while eng.has_unfinished():
            for out in eng.step():
                tokens[out.request_id] += out.token_ids
        assert [tuple(tokens[rid]) for rid in ids] == [c.token_ids for c in want]
        return [ids.index(v) for v in victims]

    assert 7 in run(0)  # the test can fail: at priority 0 the last request is a victim
    victims = run(1)
    assert victims and 7 not in victims


def test_seeded_completions_ignore_priority(model_and_prompts):
    model, prompts = model_and_prompts
    base = mixed_params(4, max_tokens=12)
    a = engine(model).generate(prompts, base)
    b = engine(model).generate(prompts, [replace(sp, priority=3 - i) for i, sp in enumerate(base)])
    assert all(same(x, y) for x, y in zip(a, b))
