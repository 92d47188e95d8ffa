"""The `reward_model` verifier on a real tiny Qwen2 sequence classifier (random init, seed 0)
saved with save_pretrained: stats normalisation against the model's own forward, batching,
the gate, mixing with a verifiable reward by weights, the timeout, config errors, the cache."""

from __future__ import annotations

import json
import logging
import math
import threading
import time

import pytest
import torch

from posttrain.core.errors import ConfigError
from posttrain.core.types import Task, Trajectory
from posttrain.verifiers import reward_model as RM
from posttrain.verifiers.registry import get_verifier, run_verifiers, task_score

PROMPT = ({"role": "user", "content": "Calculate 17 + 25."},)
COMPLETIONS = ["We add 17 and 25 to get 42.\nAnswer: 42", "Answer: 41", "I do not know.",
               "We add 17 and 25 to get 43.\nAnswer: 43", "42"]


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory, tiny_tokenizer):
    """A tiny reward model with reward_stats.json computed from its own logits on COMPLETIONS."""
    from transformers import Qwen2ForSequenceClassification

    from posttrain.train.tiny import save_model, tiny_config

    config = tiny_config("qwen2", vocab_size=len(tiny_tokenizer), pad_token_id=tiny_tokenizer.pad_token_id,
                         eos_token_id=tiny_tokenizer.eos_token_id)
    config.num_labels = 1
    torch.manual_seed(0)
    model = Qwen2ForSequenceClassification(config).eval()
    with torch.no_grad():
        model.score.weight.normal_(0.0, 1.0)  # a spread of logits, not all ~0
    path = save_model(model, tiny_tokenizer, tmp_path_factory.mktemp("rm") / "model")
    logits = [direct_logit(model, RM.judge_for(str(path)), c) for c in COMPLETIONS]
    RM.clear_cache()
    mean = sum(logits) / len(logits)
    std = math.sqrt(sum((x - mean) ** 2 for x in logits) / (len(logits) - 1))
    (path / RM.STATS_FILE).write_text(json.dumps({"mean": mean, "std": std, "n": len(logits), "version": 1}))
    return str(path), model, (mean, std)


@pytest.fixture(autouse=True)
def fresh_cache():
    RM.clear_cache()
    yield
    RM.clear_cache()


def direct_logit(model, judge, completion: str) -> float:
    """The HF model's own forward (its own last-token pooling) on the judge's encoding."""
    ids, _ = judge.encode(PROMPT, completion)
    with torch.no_grad():
        return float(model(input_ids=torch.tensor([ids])).logits[0, 0])


def make_task(options: dict, verifiers=("reward_model",), **meta) -> Task:
    return Task(id="add/0", domain="add", prompt=PROMPT, reference="42", verifiers=verifiers,
                metadata={"verifier_options": {"reward_model": options}, **meta})


def traj(text: str) -> Trajectory:
    return Trajectory(task_id="add/0", token_ids=(1,), loss_mask=(1,), logprobs=(0.0,), prompt_len=0, text=text)


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def test_stats_normalised_score_matches_the_model(rm_dir):
    path, model, (mean, std) = rm_dir
    verify = get_verifier("reward_model")
    task = make_task({"path": path})
    judge = RM.judge_for(path)
    values = []
    for text in COMPLETIONS:
        score = verify(task, traj(text))
        logit = direct_logit(model, judge, text)
        assert score.verifier == "reward_model"
        assert score.value == pytest.approx(sigmoid((logit - mean) / std), abs=1e-6)
        assert score.details["logit"] == pytest.approx(logit, abs=1e-5)
        assert score.details["value"] == score.value
        assert score.details["normalise"] == "stats" and score.details["truncated"] is False
        values.append(score.value)
    assert len({round(v, 4) for v in values}) == len(values)  # the model tells them apart
    plain = verify(make_task({"path": path, "normalise": "sigmoid"}), traj(COMPLETIONS[0]))
    assert plain.value == pytest.approx(sigmoid(direct_logit(model, judge, COMPLETIONS[0])), abs=1e-6)
    cut = verify(make_task({"path": path, "max_length": 32}), traj("7 " * 400))
    assert cut.details["truncated"] is True and 0.0 <= cut.value <= 1.0
    from posttrain.verifiers.rm_judge import RewardModelJudge  # the judge's own "stats" scale agrees

    assert RewardModelJudge(path, scale="stats", stats=(mean, std)).score(PROMPT, COMPLETIONS[0]) == \
        pytest.approx(values[0], abs=1e-6)
    with pytest.raises(ConfigError, match="stats=\\(mean, std\\)"):
        RewardModelJudge(path, scale="stats", stats=(0.0, 0.0))


def test_many_equals_one_by_one_at_any_batch(rm_dir):
    path, _, _ = rm_dir
    verify = get_verifier("reward_model")
    trajs = [traj(t) for t in COMPLETIONS]
    single = [verify(make_task({"path": path}), t).value for t in trajs]
    for batch in (1, 2, 16):
        many = verify.many(make_task({"path": path, "batch": batch}), trajs)
        assert [s.value for s in many] == pytest.approx(single, abs=1e-5)


def test_gate_skips_the_model(rm_dir, monkeypatch):
    path, _, _ = rm_dir
    judge = RM.judge_for(path)
    seen: list[int] = []
    real = judge.logits_of

    def counting(rows, batch_sequences=None):
        seen.append(len(rows))
        return real(rows, batch_sequences)

    monkeypatch.setattr(judge, "logits_of", counting)
    task = make_task({"path": path, "gate": r"Answer:\s*\d+"})
    gated, kept = get_verifier("reward_model").many(task, [traj("I do not know."), traj(COMPLETIONS[0])])
    assert gated.value == 0.0 and gated.details == {"gated": True}
    assert seen == [1]  # only the matching completion reached the model
    ungated = get_verifier("reward_model")(make_task({"path": path}), traj(COMPLETIONS[0]))
    assert kept.value == pytest.approx(ungated.value, abs=1e-6)
    seen.clear()
    assert get_verifier("reward_model")(task, traj("no answer")).details == {"gated": True} and seen == []


def test_mixed_with_a_verifiable_reward_by_weights(rm_dir):
    path, _, _ = rm_dir
    task = make_task({"path": path}, verifiers=("exact", "reward_model"), combine="weights",
                     verifier_weights={"exact": 3.0, "reward_model": 1.0})
    for text, exact in ((COMPLETIONS[0], 1.0), (COMPLETIONS[1], 0.0)):
        scores, errors = run_verifiers(task, traj(text))
        assert errors == []
        by_name = {s.verifier: s.value for s in scores}
        assert by_name["exact"] == exact
        rm = by_name["reward_model"]
        assert 0.0 < rm < 1.0
        assert task_score(scores, task) == pytest.approx((3.0 * exact + 1.0 * rm) / 4.0)


def test_timeout_returns_none_promptly(rm_dir, monkeypatch, caplog):
    path, _, _ = rm_dir
    judge = RM.judge_for(path)
    monkeypatch.setattr(judge, "logits_of", lambda rows, batch_sequences=None: time.sleep(0.5) or [0.0] * len(rows))
    task = make_task({"path": path, "timeout_s": 1e-4})
    started = time.perf_counter()
    with caplog.at_level(logging.WARNING, logger=RM.__name__):
        out = get_verifier("reward_model").many(task, [traj("a"), traj("b")])
    assert time.perf_counter() - started < 0.2
    assert out == [None, None]
    assert "reward model timed out after 0.0001s" in caplog.text
    scores, errors = run_verifiers(task, traj("a"))  # cannot judge: no score, not an error
    assert scores == [] and errors == []


def test_config_errors_are_one_line(rm_dir, tmp_path):
    path, _, _ = rm_dir
    verify = get_verifier("reward_model")
    with pytest.raises(ConfigError, match=r"^verifier reward_model needs verifier_options\.reward_model\.path$"):
        verify(make_task({}), traj("x"))
    bad = tmp_path / "rm"
    bad.mkdir()
    for content in ("{not json", '{"mean": 0.0}', '{"mean": 0.0, "std": 0.0}', '[1, 2]',
                    '{"mean": 0.0, "std": 1.0, "version": 2}'):
        (bad / RM.STATS_FILE).write_text(content)
        RM.clear_cache()
        with pytest.raises(ConfigError) as e:
            verify(make_task({"path": str(bad)}), traj("x"))
        assert "\n" not in str(e.value) and str(bad / RM.STATS_FILE) in str(e.value)
    for opts, needle in (({"path": path, "normalise": "zscore"}, "normalise"), ({"path": path, "batch": 0}, "batch"),
                         ({"path": path, "gate": "("}, "gate"), ({"path": path, "bogus": 1}, "bogus")):
        with pytest.raises(ConfigError, match=needle) as e:
            verify(make_task(opts), traj("x"))
        assert "\n" not in str(e.value)
    (bad / RM.STATS_FILE).unlink()
    with pytest.raises(ConfigError, match="does not exist"):  # stats asked for, none saved
        verify(make_task({"path": str(bad), "normalise": "stats"}), traj("x"))
    scores, errors = run_verifiers(make_task({}), traj("x"))  # in the loop: a counted error, not a crash
    assert scores == [] and errors == ["reward_model: ConfigError: verifier reward_model needs "
                                       "verifier_options.reward_model.path"]


def test_model_loaded_once_per_process(rm_dir, monkeypatch):
    path, _, _ = rm_dir
    from posttrain.verifiers import rm_judge as J

    loads: list[str] = []

    class Counting(J.RewardModelJudge):
        def __init__(self, model_path, **kw):
            loads.append(model_path)
            time.sleep(0.05)  # widen the race window
            super().__init__(model_path, **kw)

    monkeypatch.setattr(J, "RewardModelJudge", Counting)
    verify = get_verifier("reward_model")
    task = make_task({"path": path})
    first = verify(task, traj(COMPLETIONS[0]))
    second = verify.many(task, [traj(COMPLETIONS[0]), traj(COMPLETIONS[1])])
    assert loads == [path] and second[0].value == first.value
    got = []
    threads = [threading.Thread(target=lambda: got.append(RM.judge_for(path, max_length=512))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert loads == [path, path] and len({id(j) for j in got}) == 1  # a new key loads once, racing threads share it
