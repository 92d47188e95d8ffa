"""`posttrain dpo` end to end on the tiny fixture model: DPO raises the held-out preference
accuracy, the reference pass is cached, every loss of the family trains, KTO on unpaired data,
LoRA, a TRL-format file unchanged, exact resume, and bad pairs by file and line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from posttrain.checkpoint import list_checkpoints
from posttrain.config.base import load_config
from posttrain.config.pref import DPOConfig
from posttrain.core.errors import DataError
from posttrain.recipes import dpo, pref_loop
from posttrain.tasks.preferences import make_preferences, unpaired, write_jsonl
from posttrain.telemetry.metrics import read_metrics
from posttrain.core.hf import load_model

REPO = Path(__file__).resolve().parents[2]


def cfg_for(tmp_path, model_dir, **extra) -> DPOConfig:
    base = {
        "model.path": model_dir, "out_dir": str(tmp_path / "run"), "reference_cache": str(tmp_path / "refcache"),
        "data.train": "pref:polite_vs_curt,concise_vs_rambling:160", "data.eval": "pref:polite_vs_curt,concise_vs_rambling:40",
        "train.pairs_per_step": 8, "train.max_steps": 12, "train.eval_every": 12, "train.save_every": 6,
        "optim.lr": 3e-3, "optim.warmup_steps": 0, "algo.beta": 0.5,
        "logging.tensorboard": "false", "logging.progress": "false",
    }
    base.update(extra)
    return load_config(DPOConfig, None, [f"{k}={v}" for k, v in base.items()])


def test_dpo_raises_held_out_preference_accuracy_and_caches_the_reference(tmp_path, tiny_model_dir, monkeypatch):
    loads = []
    real = dpo.load_model
    monkeypatch.setattr(dpo, "load_model", lambda *a, **k: loads.append(a[0]) or real(*a, **k))
    final = dpo.run(cfg_for(tmp_path, tiny_model_dir))
    assert len(loads) == 3  # reference pass (train), reference pass (eval), the policy
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    first, last = rows[0], rows[-1]
    # the policy starts as the reference: every implicit reward is 0 and the loss is log 2
    assert first["eval/loss"] == pytest.approx(0.6931, abs=1e-3)
    # exactly: the reference pass chunks the held-out pairs as the eval pass does
    assert first["eval/rewards/margin"] == 0.0 and first["eval/rewards/accuracy"] == 0.0
    assert last["eval/rewards/accuracy"] >= 0.9, last
    assert last["eval/loss"] < 0.5
    assert last["eval/rewards/margin"] > 0.5
    steps = [r for r in rows if r["step"] > 0]
    assert all(k in steps[0] for k in ("rewards/chosen", "rewards/rejected", "rewards/accuracy", "rewards/margin",
                                       "logps/chosen", "logps/rejected"))
    assert (final / "config.json").is_file()
    assert len(list((tmp_path / "refcache").glob("*.pt"))) == 2
    # same model, tokenizer and data: the reference comes from the cache, no model is loaded for it
    loads.clear()
    dpo.run(cfg_for(tmp_path, tiny_model_dir, out_dir=str(tmp_path / "run2"), **{"train.max_steps": 1}))
    assert len(loads) == 1
    # other data: a new reference pass
    loads.clear()
    dpo.run(cfg_for(tmp_path, tiny_model_dir, out_dir=str(tmp_path / "run3"), **{
        "train.max_steps": 1, "data.train": "pref:polite_vs_curt:24"}))
    assert len(loads) == 2


@pytest.mark.parametrize("loss", ["sigmoid", "ipo", "hinge", "robust", "simpo", "orpo"])
def test_every_paired_loss_lowers_its_own_held_out_loss(tmp_path, tiny_model_dir, loss):
    extra = {"algo.loss": loss, "train.max_steps": 6, "train.eval_every": 6}
    if loss == "robust":
        extra["algo.label_smoothing"] = 0.1
    if loss == "simpo":
        extra["algo.beta"] = 2.0
    dpo.run(cfg_for(tmp_path, tiny_model_dir, **extra))
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert rows[-1]["eval/loss"] < rows[0]["eval/loss"] - 1e-3, (rows[0]["eval/loss"], rows[-1]["eval/loss"])
    assert rows[-1]["eval/rewards/accuracy"] > 0.5
    if loss in ("simpo", "orpo"):  # reference-free: no reference pass at all
        assert not (tmp_path / "refcache").exists()


def test_kto_on_unpaired_data_separates_desirable_from_undesirable(tmp_path, tiny_model_dir):
    train = write_jsonl(unpaired(make_preferences(["polite_vs_curt"], 80, 0)), tmp_path / "kto.jsonl")
    held = write_jsonl(unpaired(make_preferences(["polite_vs_curt"], 20, 1_000_000)), tmp_path / "kto_eval.jsonl")
    dpo.run(cfg_for(tmp_path, tiny_model_dir, **{"algo.loss": "kto", "data.train": str(train), "data.eval": str(held)}))
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    first, last = rows[0], rows[-1]
    assert first["eval/rewards/desirable"] == pytest.approx(0.0, abs=1e-5)
    assert last["eval/rewards/desirable"] > last["eval/rewards/undesirable"] + 0.5
    assert last["eval/loss"] < first["eval/loss"]


def test_lora_trains_only_adapters_and_exports_a_merged_model(tmp_path, tiny_model_dir):
    final = dpo.run(cfg_for(tmp_path, tiny_model_dir, **{"model.lora.r": 4, "model.lora.alpha": 8, "optim.lr": 1e-2}))
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert rows[0]["trainable_params"] < rows[0]["total_params"] / 5
    assert rows[-1]["eval/rewards/accuracy"] > 0.6
    merged, start = load_model(str(final)).state_dict(), load_model(tiny_model_dir).state_dict()
    assert set(merged) == set(start)  # a plain model, no adapter keys
    changed = [k for k in merged if not torch.equal(merged[k], start[k])]
    assert changed and all("proj" in k for k in changed)


def test_a_trl_format_file_trains_unchanged(tmp_path, tiny_model_dir):
    # TRL's conversational preference format, with its extra columns, as users bring it
    records = [{"prompt": [{"role": "user", "content": f"What colour is the sky on day {i}?"}],
                "chosen": [{"role": "assistant", "content": "It is blue, thank you for asking."}],
                "rejected": [{"role": "assistant", "content": "green"}], "score_chosen": 8.0, "score_rejected": 2.0}
               for i in range(40)]
    path = tmp_path / "trl.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    dpo.run(cfg_for(tmp_path, tiny_model_dir, **{"data.train": str(path), "data.eval": "null",
                                                 "data.eval_fraction": 0.2}))
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert rows[0]["train_pairs"] == 32 and rows[0]["eval_pairs"] == 8
    assert rows[-1]["eval/rewards/accuracy"] == 1.0


def test_resume_repeats_the_uninterrupted_run_exactly(tmp_path, tiny_model_dir):
    whole = dpo.run(cfg_for(tmp_path / "a", tiny_model_dir) if (tmp_path / "a").mkdir() is None else None)
    cfg = cfg_for(tmp_path / "b", tiny_model_dir) if (tmp_path / "b").mkdir() is None else None
    dpo.run(cfg)
    run_dir = tmp_path / "b" / "run"
    saved = list_checkpoints(run_dir)
    assert [s for s, _ in saved] == [6, 12]
    shutil.rmtree(run_dir / "final")
    shutil.rmtree(saved[-1][1])  # as if killed after the step-6 checkpoint
    resumed = dpo.run(cfg, resume=True)
    a, b = load_model(str(whole)).state_dict(), load_model(str(resumed)).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    rows_a = [r for r in read_metrics(tmp_path / "a" / "run" / "metrics.jsonl") if r["step"] > 6]
    rows_b = [r for r in read_metrics(run_dir / "metrics.jsonl") if r["step"] > 6]
    assert [r["loss"] for r in rows_a] == [r["loss"] for r in rows_b]


def _bad_file(tmp_path) -> Path:
    good = make_preferences(["polite_vs_curt"], 12, 0, conversational=False)
    lines = [json.dumps(r) for r in good]
    lines[3] = json.dumps({"prompt": "hi", "chosen": "same", "rejected": "same"})
    lines[7] = json.dumps({"prompt": "hi", "chosen": "yes"})
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_bad_pairs_fail_by_file_and_line_unless_skipped(tmp_path, tiny_model_dir):
    path = _bad_file(tmp_path)
    with pytest.raises(DataError) as e:
        dpo.run(cfg_for(tmp_path, tiny_model_dir, **{"data.train": str(path), "data.eval": "null"}))
    assert str(e.value) == f"{path}:4: chosen and rejected are identical (and 1 more bad line: line 8)"  # all, in one pass
    out = subprocess.run([sys.executable, "-m", "posttrain.cli", "dpo", f"model.path={tiny_model_dir}",
                          f"data.train={path}", "data.eval=null", f"out_dir={tmp_path / 'cli'}",
                          f"reference_cache={tmp_path / 'rc'}"], capture_output=True, text=True, cwd=REPO)
    assert out.returncode != 0
    assert f"{path}:4: chosen and rejected are identical" in out.stderr and "Traceback" not in out.stderr
    dpo.run(cfg_for(tmp_path, tiny_model_dir, **{"data.train": str(path), "data.eval": "null",
                                                 "data.skip_bad_lines": "true", "train.max_steps": 1}))
    first = read_metrics(tmp_path / "run" / "metrics.jsonl")[0]
    assert first["bad_lines"] == 2 and first["train_pairs"] + first["eval_pairs"] == 10


def test_sft_coef_adds_the_chosen_mean_nll_to_each_pairs_loss():
    from posttrain.config.pref import PrefAlgoConfig

    pc, pr, rc, rr = (torch.tensor(v) for v in ([-6.0, -9.0], [-8.0, -7.0], [-7.0, -8.5], [-7.5, -7.2]))
    nc, nr = torch.tensor([3.0, 4.0]), torch.tensor([2.0, 5.0])
    plain = pref_loop.pair_loss(PrefAlgoConfig(beta=0.2), pc, pr, nc, nr, rc, rr)
    rpo = pref_loop.pair_loss(PrefAlgoConfig(beta=0.2, sft_coef=0.5), pc, pr, nc, nr, rc, rr)
    assert torch.allclose(rpo.loss - plain.loss, torch.tensor([0.5 * 6.0 / 3, 0.5 * 9.0 / 4]))
    assert torch.equal(rpo.chosen_reward, plain.chosen_reward)  # the implicit rewards are DPO's
