"""Long-context probes: the needle sources (deterministic, needles at their depths, options checked),
the `needle` verifier, the (length, depth) summary, its report section, and a tiny run through the
paged engine with chunked prefill."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest

from posttrain.core.errors import ConfigError
from posttrain.eval.analyses import run_analyses
from posttrain.domains.longctx.analysis import summarize
from posttrain.eval.evaluate import SampleRecord, evaluate_tasks
from posttrain.domains.longctx import source as longctx
from posttrain.tasks.registry import is_source, make_source_tasks
from posttrain.domains.longctx.report import render_long_context
from posttrain.telemetry.report.evals import KIT
from posttrain.core.types import Task, Trajectory
from posttrain.verifiers import get_verifier

SMOLLM2 = Path(__file__).resolve().parents[4] / ".cache/posttrain/models/smollm2-135m-instruct"


def document(task: Task) -> str:
    return re.search(r"<document>\n(.*)\n</document>", task.prompt[0]["content"], re.S).group(1)


def reply(task: Task, text: str) -> float:
    score = get_verifier("needle")(task, Trajectory(task.id, (), (), (), 0, text=text))
    return score.value


# ---- the sources


def test_generation_is_deterministic_and_round_robin_over_cells():
    opts = {"lengths": [1024, 2048], "depths": [0.0, 0.5, 1.0]}
    a = make_source_tasks("needle", 12, seed=5, options=opts)
    assert a == make_source_tasks("needle", 12, seed=5, options=opts)
    assert [t.prompt for t in a] != [t.prompt for t in make_source_tasks("needle", 12, seed=6, options=opts)]
    cells = [(t.metadata["length"], t.metadata["depth"]) for t in a]
    assert cells[:6] == [(1024, 0.0), (1024, 0.5), (1024, 1.0), (2048, 0.0), (2048, 0.5), (2048, 1.0)]
    assert cells[6:] == cells[:6]  # every cell twice
    assert len({t.id for t in a}) == 12 and all(is_source(v) for v in longctx.VARIANTS)
    assert a[4].id == "needle/2048/0.5/9"  # source/length/depth/seed + i
    for t in a:
        assert t.domain == "needle" and t.verifiers == ("needle",) and t.limits.max_new_tokens == 48
        assert t.metadata["source"] == "longctx" and t.metadata["variant"] == "needle"
        [value] = t.reference["values"]
        assert re.fullmatch(r"[1-9]\d{6}", value) and t.prompt[0]["content"].count(value) == 1
        assert not re.search(r"\d", document(t).replace(value, ""))  # the filler holds no numbers
        assert t.prompt[0]["content"].rstrip().endswith("`Answer: <number>`.")
    assert len({t.reference["answer"] for t in a}) == 12  # values are drawn, not fixed
    longer = [len(document(t)) for t in a if t.metadata["length"] == 2048]
    assert min(longer) > 1.8 * max(len(document(t)) for t in a if t.metadata["length"] == 1024)
    assert len(make_source_tasks("needle_multi", None, 0, {"lengths": [512], "depths": [0.0, 1.0]})) == 2


@pytest.mark.parametrize("variant", longctx.VARIANTS)
def test_answer_facts_sit_at_the_requested_depth(variant):
    depths = [0.0, 0.25, 0.5, 0.75, 1.0]
    for t in make_source_tasks(variant, 5, seed=1, options={"lengths": [1024], "depths": depths}):
        doc, d = document(t), t.metadata["depth"]
        at = [doc.index(v) / len(doc) for v in t.reference["values"]]
        k = len(at)
        expected = [d + i * (1 - d) / k for i in range(k)]  # multi: the rest evenly spaced after the first
        assert at == pytest.approx(expected, abs=0.05), (variant, d)
        assert t.metadata["needle_depths"] == pytest.approx(at, abs=0.02)
        if variant == "needle_multihop":  # the link fact half a document away from the code fact
            person = re.search(r"wing where (.+)'s office", t.prompt[0]["content"]).group(1)
            assert doc.index(f"{person}'s office") / len(doc) == pytest.approx((d + 0.5) % 1.0, abs=0.05)
            assert len(re.findall(r"access code of the \w+ wing is \d+", doc)) == 2  # a decoy chain


def test_options_are_validated():
    with pytest.raises(ConfigError, match="'lenghts'"):
        make_source_tasks("needle", 2, 0, {"lenghts": [1024]})
    with pytest.raises(ConfigError, match="depths"):
        make_source_tasks("needle", 2, 0, {"depths": [0.5, 1.5]})
    with pytest.raises(ConfigError, match="lengths"):
        make_source_tasks("needle_multihop", 2, 0, {"lengths": []})
    with pytest.raises(ConfigError, match="'keys'"):  # keys is needle_multi's alone
        make_source_tasks("needle", 2, 0, {"keys": 3})
    with pytest.raises(ConfigError, match="keys"):
        make_source_tasks("needle_multi", 2, 0, {"keys": 1})
    with pytest.raises(ConfigError, match=r"lengths: 100 tokens is too short.*at least \d+"):
        make_source_tasks("needle", 2, 0, {"lengths": [100]})
    multi = make_source_tasks("needle_multi", 1, 0, {"keys": 5, "lengths": [1024]})[0]
    assert len(multi.reference["values"]) == 5 and multi.prompt[0]["content"].count("<number>") == 5
    assert multi.limits.max_new_tokens == 48 + 4 * 20  # room for a sentence per value


@pytest.mark.skipif(not (SMOLLM2 / "tokenizer.json").is_file(), reason="SmolLM2 not converted (posttrain models get)")
def test_prompts_stay_below_the_nominal_length_in_smollm2_tokens():
    from transformers import AutoTokenizer

    from posttrain.envs.single_turn import prompt_ids

    tok = AutoTokenizer.from_pretrained(SMOLLM2)
    for variant in longctx.VARIANTS:
        for t in make_source_tasks(variant, 4, 0, {"lengths": [1024, 8192], "depths": [0.0, 1.0]}):
            tokens = len(prompt_ids(tok, t))
            assert 0.85 * t.metadata["length"] <= tokens < t.metadata["length"] - t.limits.max_new_tokens


# ---- the verifier


def test_needle_verifier_reads_only_the_answer_line():
    [t] = make_source_tasks("needle", 1, 3, {"lengths": [512], "depths": [0.5]})
    v = t.reference["values"][0]
    assert reply(t, f"The number is {v}.\nAnswer: {v}") == 1.0
    assert reply(t, f"Answer: {v}.\nI hope that helps with 42 things.") == 1.0  # the first line after Answer:
    assert reply(t, f"The secret number\nof the key is {v}.") == 1.0  # no Answer line: the whole reply
    assert reply(t, f"It is not 1234567; the secret number is {v}.") == 0.0
    assert reply(t, f"I saw {v} in the text.\nAnswer: 1234567") == 0.0  # the value, but a wrong answer line
    assert reply(t, f"Answer: 1234567, {v}, 7654321, 1111111") == 0.0  # listing candidates
    assert reply(t, f"Answer: {v}0") == 0.0 and reply(t, "Answer: " + v[:-1]) == 0.0
    assert reply(t, "Answer:") == 0.0 and reply(t, "") == 0.0


def test_needle_verifier_multi_is_a_fraction_and_passes_only_with_all():
    [t] = make_source_tasks("needle_multi", 1, 3, {"lengths": [1024], "depths": [0.0], "keys": 3})
    a, b, c = t.reference["values"]
    assert reply(t, f"Answer: {a}, {b}, {c}") == 1.0
    assert reply(t, f"Answer: {a}, {b}, 5555555") == pytest.approx(2 / 3)
    assert reply(t, f"Answer: {a}, {b}") == pytest.approx(2 / 3)
    assert reply(t, f"Answer: {c}, {a}, {b}") == 0.0  # the right numbers for the wrong keys
    assert reply(t, f"Answer: {a}, {b}, {c}, 1234567") == 0.0
    assert reply(t, f"The first is {a}.\nThe second is {b}.\nThe third is {c}.") == 1.0  # untagged, in order
    [hop] = make_source_tasks("needle_multihop", 1, 3, {"lengths": [1024], "depths": [0.5]})
    gold = hop.reference["values"][0]
    decoy = [x for x in re.findall(r"wing is (\d+)", document(hop)) if x != gold]
    assert len(decoy) == 1 and reply(hop, f"Answer: {decoy[0]}") == 0.0 and reply(hop, f"Answer: {gold}") == 1.0


# ---- the summary and its report section


def record(task: Task, correct: bool, prompt_tokens: int, sample: int = 0) -> SampleRecord:
    return SampleRecord(task.id, task.domain, sample, "", float(correct), correct, "stop", 3,
                        prompt_tokens=prompt_tokens)


class KVEngine:
    def kv_stats(self):
        return {"bytes_per_token": 46080, "blocks_used": 0}


def test_summarize_grid_by_length_and_depth():
    tasks = make_source_tasks("needle", 8, 0, {"lengths": [512, 1024], "depths": [0.0, 1.0]})
    multi = make_source_tasks("needle_multi", 2, 0, {"lengths": [1024], "depths": [0.5, 0.75]})
    other = Task("chain_sum/0", "chain_sum", ({"role": "user", "content": "1+1"},), "2", ("exact",))
    # needle: cell (512, 0) 2/2 right, (512, 1) 1/2, (1024, 0) 0/2, (1024, 1) 1/2 plus a second sample wrong
    right = {0: True, 4: True, 1: True, 5: False, 2: False, 6: False, 3: True, 7: False}
    records = [record(t, right[i], 400 + 100 * i) for i, t in enumerate(tasks)]
    records += [record(tasks[3], False, 700, sample=1), record(multi[0], True, 900), record(other, True, 5000)]
    data = summarize(tasks + multi + [other], records, KVEngine())
    needle = data["variants"]["needle"]
    assert (needle["lengths"], needle["depths"]) == ([512, 1024], [0.0, 1.0])
    assert needle["accuracy"] == [[1.0, 0.5], [0.0, pytest.approx(1 / 3)]]
    assert needle["n"] == [[2, 2], [2, 3]]
    assert needle["prompt_tokens"] == [[(400 + 800) / 2, (500 + 900) / 2], [(600 + 1000) / 2, (700 + 1100 + 700) / 3]]
    m = data["variants"]["needle_multi"]
    assert (m["depths"], m["accuracy"], m["n"], m["prompt_tokens"]) == ([0.5, 0.75], [[1.0, None]], [[1, 0]], [[900, None]])
    assert list(data["variants"]) == ["needle", "needle_multi"]
    assert data["kv_bytes_per_token"] == 46080 and data["max_prompt_tokens"] == 1100  # chain_sum's 5000 is no probe
    assert summarize([other], records, KVEngine()) is None
    assert summarize(tasks, records[:8], object())["kv_bytes_per_token"] is None
    assert run_analyses(tasks, records[:8], KVEngine())["long_context"]["variants"]["needle"]["n"] == [[2, 2], [2, 2]]

    page = render_long_context(data, KIT)
    uris = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(uris) == 2 and all(base64.b64decode(u).startswith(b"\x89PNG") for u in uris)
    assert "lost in the middle" in page.lower() and "45.0 KiB per token (46080 bytes)" in page
    assert page.startswith('<section class="long-context">') and "http" not in page
    bad = render_long_context({"variants": {"<b>x</b>": {"lengths": [1]}}, "kv_bytes_per_token": None}, KIT)
    assert "&lt;b&gt;x&lt;/b&gt;" in bad and "<b>" not in bad and "not reported" in bad
    assert render_long_context({}, KIT) == ""


# ---- a tiny end-to-end run through the paged engine


def test_probes_run_through_the_paged_engine_with_chunked_prefill(tiny_model_dir, tiny_tokenizer):
    from posttrain.engine.paged.factory import make_engine

    # the tiny tokenizer packs English ~3x less densely than SmolLM2's: these prompts are 500-800 tokens,
    # within the tiny model's 1024 positions
    tasks = make_source_tasks("needle", 4, 0, {"lengths": [192, 256], "depths": [0.0, 1.0]})
    chunked = make_engine(tiny_model_dir, tiny_tokenizer, device="cpu", max_num_batched_tokens=64, speculative=None)
    fed: list[int] = []
    schedule = chunked.scheduler.schedule

    def spy(*args):
        out = schedule(*args)
        fed.append(sum(s.num_tokens for s in out.scheduled))
        return out

    chunked.scheduler.schedule = spy
    stop = [tiny_tokenizer.eos_token_id]
    result = evaluate_tasks(chunked, tiny_tokenizer, tasks, max_tokens=16, stop_ids=stop)
    data = run_analyses(tasks, result.records, chunked)["long_context"]
    assert max(fed) <= 64 and data["max_prompt_tokens"] > 4 * 64  # each prompt took several prefill steps
    assert data["kv_bytes_per_token"] == chunked.kv_stats()["bytes_per_token"] > 0
    grid = data["variants"]["needle"]
    assert grid["n"] == [[1, 1], [1, 1]] and all(a in (0.0, 1.0) for row in grid["accuracy"] for a in row)
    assert all(r.prompt_tokens > 0 for r in result.records)
    whole = make_engine(tiny_model_dir, tiny_tokenizer, device="cpu", max_num_batched_tokens=4096, speculative=None)
    again = evaluate_tasks(whole, tiny_tokenizer, tasks, max_tokens=16, stop_ids=stop)
    assert [r.completion for r in again.records] == [r.completion for r in result.records]  # chunking changes nothing
    assert "<img" in render_long_context(data, KIT)
