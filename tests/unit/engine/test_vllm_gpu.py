"""vLLM as the GPU rollout engine, opt-in (`pytest -m gpu`, needs CUDA and `pip install 'posttrain[vllm]'`):
token ids in, token ids and the sampler's logprobs out (checked against an HF forward pass), weights synced
from the trainer (the completion changes, the version moves), pause / resume around the update. Not run on
CPU machines (CI here): it is skipped there."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def engine(tiny_llama_dir):
    pytest.importorskip("vllm")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from posttrain.engine.vllm import VLLMEngine

    return VLLMEngine(tiny_llama_dir, gpu_memory_utilization=0.2, enforce_eager=True, dtype="float32",
                      enable_sleep_mode=True)


def test_token_ids_and_logprobs_follow_the_engine_contract(engine, tiny_llama_dir):
    from transformers import AutoModelForCausalLM

    from posttrain.engine.protocol import SamplingParams

    prompt = [1, 5, 9, 13, 17]
    [c] = engine.generate([prompt], [SamplingParams(temperature=1.0, max_tokens=8, seed=3)])
    [again] = engine.generate([prompt], [SamplingParams(temperature=1.0, max_tokens=8, seed=3)])
    assert c.token_ids == again.token_ids and len(c.token_ids) == 8
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).cuda()
    ids = torch.tensor([prompt + list(c.token_ids)], device="cuda")
    logp = torch.log_softmax(model(ids).logits[0, len(prompt) - 1:-1].float(), -1)
    want = logp.gather(-1, torch.tensor(c.token_ids, device="cuda")[:, None])[:, 0].tolist()
    assert c.logprobs == pytest.approx(want, abs=1e-3)


def test_weight_sync_with_pause_and_resume_changes_what_it_samples(engine, tiny_llama_dir):
    from transformers import AutoModelForCausalLM

    from posttrain.engine.protocol import SamplingParams

    params = [SamplingParams(temperature=0.0, max_tokens=8)]
    before = engine.generate([[1, 2, 3]], params)[0].token_ids
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32)
    state = {k: v + 0.05 * torch.randn_like(v) for k, v in model.state_dict().items()}
    engine.pause()
    assert engine.sleeping
    engine.update_weights(state, 7)
    assert not engine.sleeping and engine.version == 7
    after = engine.generate([[1, 2, 3]], params)[0].token_ids
    assert after != before
