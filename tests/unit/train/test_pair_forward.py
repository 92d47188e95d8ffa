"""Packed completion logprobs of preference pairs (shared-prefix packing and the position-id fallback)
equal each item run alone through the model, values and parameter gradients, on Qwen2 and Llama."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
import torch

from posttrain.core.errors import DataError
from posttrain.core.hf import load_model
from posttrain.train.pair_forward import completion_logps, pair_items, token_chunks
from posttrain.train.rl_batch import Sample, build_rl_microbatches, supports_shared_prefix

PAD = 0


def make_pairs(vocab: int, n: int = 6, seed: int = 0):
    rng = random.Random(seed)
    tok = lambda k: [rng.randrange(3, vocab) for _ in range(k)]  # noqa: E731
    return [SimpleNamespace(prompt_ids=tok(rng.randint(1, 9)), chosen_ids=tok(rng.randint(1, 7)),
                            rejected_ids=tok(rng.randint(1, 7))) for _ in range(n)]


def unpacked(model, items) -> torch.Tensor:
    """Each item alone: sum over its completion tokens of log_softmax(logits)[token]."""
    out = []
    for prompt, completion in items:
        ids = torch.tensor([[*prompt, *completion]])
        logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)
        p = len(prompt)
        targets = ids[0, p:]
        out.append(logp[p - 1 : p - 1 + len(completion)].gather(-1, targets[:, None]).sum())
    return torch.stack(out)


def grads(model, loss: torch.Tensor, names: list[str]) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    loss.backward()
    params = dict(model.named_parameters())
    return {n: params[n].grad.detach().clone() for n in names}


@pytest.fixture(scope="module", params=["qwen2", "llama"])
def model(request, tiny_model_dir, tiny_llama_dir):
    path = tiny_model_dir if request.param == "qwen2" else tiny_llama_dir
    torch.manual_seed(0)
    return load_model(path, dtype="float32", device=torch.device("cpu"))


@pytest.mark.parametrize("share_prefix", [None, False])
@pytest.mark.parametrize("budget", [8192, 24])
def test_packed_equals_unpacked_values_and_grads(model, share_prefix, budget):
    items = pair_items(make_pairs(model.config.vocab_size))
    assert share_prefix is False or supports_shared_prefix(model)
    names = [n for n, _ in model.named_parameters()]
    names = [names[0], names[len(names) // 2], names[-1]]  # embeddings, a middle layer, the final norm
    sums, counts = completion_logps(model, items, max_tokens_per_microbatch=budget, pad_id=PAD,
                                    share_prefix=share_prefix)
    assert sums.dtype == torch.float32 and sums.shape == (len(items),)
    assert counts.tolist() == [len(c) for _, c in items]
    assert sums.requires_grad
    with torch.no_grad():
        expected = unpacked(model, items)
    torch.testing.assert_close(sums.detach(), expected, atol=1e-6, rtol=1e-6)
    packed_grads = grads(model, sums.sum(), names)
    ref_grads = grads(model, unpacked(model, items).sum(), names)
    for n in names:
        torch.testing.assert_close(packed_grads[n], ref_grads[n], atol=1e-5, rtol=1e-5)
    model.zero_grad(set_to_none=True)


def test_small_budget_makes_several_microbatches(model):
    """The 24-token budget of the test above really splits the items."""
    items = pair_items(make_pairs(model.config.vocab_size))
    samples = [Sample(token_ids=[*p, *c], loss_mask=[0] * len(p) + [1] * len(c), old_logprobs=[0.0] * (len(p) + len(c)),
                      advantage=0.0, seq=k) for k, (p, c) in enumerate(items)]
    assert len(build_rl_microbatches(samples, max_tokens_per_microbatch=24, pad_id=PAD)) > 2


def test_pair_shares_its_prompt():
    """Shared-prefix packing lays a pair out once as [prompt, chosen, rejected]."""
    pair = SimpleNamespace(prompt_ids=[5, 6, 7], chosen_ids=[8, 9], rejected_ids=[10])
    items = pair_items([pair])
    assert items == [([5, 6, 7], [8, 9]), ([5, 6, 7], [10])]
    samples = [Sample(token_ids=[*p, *c], loss_mask=[0] * len(p) + [1] * len(c), old_logprobs=[0.0] * (len(p) + len(c)),
                      advantage=0.0, seq=k) for k, (p, c) in enumerate(items)]
    (mb,) = build_rl_microbatches(samples, max_tokens_per_microbatch=100, pad_id=PAD)
    assert mb.input_ids.tolist() == [[5, 6, 7, 8, 9, 10]]


def test_empty_completion_and_empty_prompt(model):
    sums, counts = completion_logps(model, [([4, 5], []), ([4, 5], [6])], pad_id=PAD)
    assert counts.tolist() == [0, 1] and sums[0].item() == 0.0 and sums[1].item() < 0
    sums, counts = completion_logps(model, [([4], [])], pad_id=PAD)
    assert sums.tolist() == [0.0] and counts.tolist() == [0]
    with pytest.raises(DataError, match="empty prompt"):
        completion_logps(model, [([], [6, 7])], pad_id=PAD)


def test_token_chunks_keep_order_and_budget():
    lengths = [10, 25, 5, 40, 3, 60, 1]
    chunks = token_chunks(lengths, 40)
    assert [i for c in chunks for i in c] == list(range(len(lengths)))
    assert chunks == [[0, 1, 2], [3], [4], [5], [6]]  # 60 > budget: a group of its own
    assert all(sum(lengths[i] for i in c) <= 40 or len(c) == 1 for c in chunks)
    assert token_chunks([], 50) == []
