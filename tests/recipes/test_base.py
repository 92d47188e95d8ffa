"""The embedded base: corpus, tokenizer, packing, schedule, and a tiny real build with its cache."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from posttrain.config.pipeline import BaseConfig
from posttrain.core.errors import ConfigError
from posttrain.recipes import base
from posttrain.domains.reasoning_gym.source import EVAL_SEED_START, make_tasks


def tiny_cfg(tmp_path: Path, **kw) -> BaseConfig:
    settings = dict(
        out_dir=str(tmp_path / "out"), cache_dir=str(tmp_path / "cache"), hidden_size=32, num_layers=1,
        num_heads=2, num_kv_heads=1, intermediate_size=64, vocab_size=300, corpus_examples=120, seq_len=64,
        batch_size=4, max_steps=4, max_seconds=60, probe_tasks=2,
        logging={"tensorboard": False, "progress": False},
    )
    settings.update(kw)
    return BaseConfig(**settings)


def test_lr_factor_by_hand():
    assert base.lr_factor(0.0) == 0.0
    assert base.lr_factor(0.025) == pytest.approx(0.5)  # halfway through warmup
    assert base.lr_factor(0.05) == pytest.approx(1.0)
    assert base.lr_factor(0.525) == pytest.approx(0.1 + 0.9 * 0.5)  # cosine midpoint
    assert base.lr_factor(1.0) == pytest.approx(0.1)
    assert base.lr_factor(3.0) == pytest.approx(0.1)


def test_weights_key_ignores_paths_logging_and_probe():
    a = BaseConfig()
    same = BaseConfig(out_dir="elsewhere", cache_dir="/tmp/c", probe_tasks=0, logging={"tensorboard": False})
    assert base.weights_key(a) == base.weights_key(same)
    for change in ({"lr": 5e-4}, {"seed": 1}, {"wrong_fraction": 0.1}, {"domains": ["chain_sum"]}):
        assert base.weights_key(BaseConfig(**change)) != base.weights_key(a)


def _answers(docs):
    return [doc.rsplit("Answer: ", 1)[1] for doc in docs]


def test_corpus_documents_and_wrong_fraction(tmp_path):
    cfg = tiny_cfg(tmp_path, domains=["chain_sum"], corpus_examples=300, wrong_fraction=0.0)
    right = base.build_corpus(cfg)
    assert len(right) == 300
    for doc in right:
        assert doc.startswith("Question: ") and "\nSolution: " in doc and "<|im_start|>" not in doc
        expr = doc.split("problem: ", 1)[1].split(" =\n", 1)[0]
        assert doc.endswith(f"\nAnswer: {eval(expr)}")  # chain_sum: + and - only
    wrong = base.build_corpus(cfg.model_copy(update={"wrong_fraction": 1.0}))
    assert [d.split("\n")[0] for d in wrong] == [d.split("\n")[0] for d in right]  # same questions
    assert all(a != b for a, b in zip(_answers(wrong), _answers(right)))
    some = base.build_corpus(cfg.model_copy(update={"wrong_fraction": 0.3}))
    share = sum(a != b for a, b in zip(_answers(some), _answers(right))) / len(right)
    assert 0.2 < share < 0.4


def test_corpus_easy_share_and_no_eval_questions(tmp_path):
    opts = {"chain_sum": {"max_terms": 2, "max_digits": 2}}  # 2 x 110^2 questions (1 digit: 200, used up by the holdout)
    cfg = tiny_cfg(tmp_path, domains=["basic_arithmetic", "chain_sum"], corpus_examples=2000,
                   corpus_options=opts, corpus_easy_fraction=0.5)
    docs = base.build_corpus(cfg)
    chain = [d for d in docs if "State the final answer" in d]
    easy = [d for d in chain if d.split("\n")[0].count(" + ") + d.split("\n")[0].count(" - ") == 1
            and max(len(x) for x in d.split("problem: ")[1].split(" =")[0].split(" ")) <= 2]
    assert len(chain) == 1000 and len(easy) >= 500 and len({d.split("\n")[0] for d in easy}) >= 450
    questions = {d.split("\n")[0][len("Question: "):] for d in docs}
    held_out = {t.reference["question"] for name in cfg.domains for t in make_tasks(name, 1000, EVAL_SEED_START)}
    assert not questions & held_out, sorted(questions & held_out)[:3]
    tiny = cfg.model_copy(update={"corpus_options": {"chain_sum": {"max_terms": 2, "max_digits": 1}}})
    with pytest.raises(ConfigError, match="only 1 distinct training question"):  # not 500 copies of "5 - 9"
        base.build_corpus(tiny)
    with pytest.raises(ConfigError, match="chain_summ"):
        base.build_corpus(cfg.model_copy(update={"corpus_options": {"chain_summ": {}}}))
    unused = cfg.model_copy(update={"corpus_options": {"gcd": {"min_value": 1}}})  # gcd is not in domains
    assert len(base.build_corpus(unused)) == 2000


def test_pack_is_contiguous(tmp_path):
    docs = base.build_corpus(tiny_cfg(tmp_path, domains=["chain_sum"], corpus_examples=40))
    tok = base.make_tokenizer(docs, 300, split_digits=True)
    rows = base.pack(docs, tok, 32)
    ids = []
    for doc in docs:
        ids += tok(doc, add_special_tokens=False)["input_ids"] + [tok.pad_token_id]
    assert rows.shape == (len(ids) // 32, 32)
    assert rows.flatten().tolist() == ids[: rows.numel()]
    assert len(tok("1234", add_special_tokens=False)["input_ids"]) == 4  # digit by digit
    with pytest.raises(ConfigError, match="seq_len"):
        base.pack(docs[:1], tok, 10_000)


def _weights(model_dir: Path) -> bytes:
    return (model_dir / "model.safetensors").read_bytes()


def test_tiny_base_build_loads_and_is_cached(tmp_path):
    from posttrain.core.hf import load_model_and_tokenizer

    cfg = tiny_cfg(tmp_path)
    start = time.monotonic()
    model_dir = base.run(cfg)
    first = time.monotonic() - start
    assert model_dir == tmp_path / "out" / "model"
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        assert (model_dir / name).is_file()
    model, tok = load_model_and_tokenizer(str(model_dir))
    assert tok.chat_template and "<|im_start|>" in tok.chat_template
    rendered = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert rendered.endswith("<|im_start|>assistant\n")
    assert len(tok("1234", add_special_tokens=False)["input_ids"]) == 4  # the digit split survives save/load
    assert sum(p.numel() for p in model.parameters()) > 0
    out = tmp_path / "out"
    assert (out / "config.yaml").is_file()
    info = json.loads((out / "base.json").read_text())
    assert info["steps"] == 4 and info["params"] > 0 and info["tokens_per_s"] > 0
    assert set(info["probe_accuracy"]) == {"basic_arithmetic", "chain_sum"}
    losses = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert losses[0]["step"] == 1 and losses[-1]["step"] == 4 and all("loss" in r for r in losses)

    # a second run with the same weights config (other out_dir, other logging) reuses the cache
    again = cfg.model_copy(update={"out_dir": str(tmp_path / "out2"), "probe_tasks": 0})
    start = time.monotonic()
    second_dir = base.run(again)
    second = time.monotonic() - start
    assert _weights(second_dir) == _weights(model_dir)
    assert second < max(3.0, first / 2)
    assert (tmp_path / "out2" / "metrics.jsonl").read_text() == (out / "metrics.jsonl").read_text()
    assert list((tmp_path / "cache").iterdir()) == [tmp_path / "cache" / base.weights_key(cfg)]


def test_partial_cache_entry_is_never_used(tmp_path):
    cfg = tiny_cfg(tmp_path, max_steps=2, probe_tasks=0)
    key = base.weights_key(cfg)
    broken = tmp_path / "cache" / key / "model"
    broken.mkdir(parents=True)
    (broken / "config.json").write_text("{}")  # a crash left this; there is no base.json
    (tmp_path / "cache" / f".{key}.tmp-999").mkdir()  # and a half-written temp entry
    model_dir = base.run(cfg)
    info = json.loads((tmp_path / "cache" / key / "base.json").read_text())
    assert info["steps"] == 2
    assert json.loads((model_dir / "config.json").read_text())["hidden_size"] == 32


def test_time_capped_base_is_used_but_not_cached(tmp_path):
    cfg = tiny_cfg(tmp_path, max_steps=100_000, max_seconds=1.0, probe_tasks=0)
    model_dir = base.run(cfg)
    info = json.loads((tmp_path / "out" / "base.json").read_text())
    assert info["stopped_by"] == "max_seconds" and info["steps"] < 100_000
    assert (model_dir / "model.safetensors").is_file()
    assert not (tmp_path / "cache" / base.weights_key(cfg)).exists()
    assert [p for p in (tmp_path / "cache").iterdir()] == []  # no temp dir left either


def test_precision_choice():
    assert base.use_bf16("bfloat16") is True
    assert base.use_bf16("float32") is False
    assert base.use_bf16("auto") is base.cpu_has_native_bf16()


def test_thread_tuner_switches_to_the_faster_count(monkeypatch):
    import torch

    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    chosen = []
    monkeypatch.setattr(torch, "set_num_threads", chosen.append)
    tuner = base.ThreadTuner(every=10, trial=3)
    seconds = {2: 1.0, 1: 0.3}  # a busy machine: one thread is faster
    used = []
    for step in range(30):
        n = tuner.start(step)
        used.append(n)
        tuner.record(step, n, seconds[n])
    assert used[:3] == [2, 2, 2] and used[3:6] == [1, 1, 1]  # the first trial
    assert tuner.current == 1 and used[6:13] == [1] * 7 and used[13:16] == [2, 2, 2]  # retried, kept 1
    tuner.restore()
    assert chosen[-1] == 2
    idle = base.ThreadTuner(every=10, trial=3)
    for step in range(30):
        n = idle.start(step)
        idle.record(step, n, {2: 0.5, 1: 0.9}[n])
    assert idle.current == 2
