"""Batched generation: left padding must not change greedy output; K samples per prompt; stop tokens."""

from __future__ import annotations

import pytest

from posttrain.eval.generate import generate


@pytest.fixture(scope="module")
def model_and_tok(tiny_model_dir):
    from posttrain.core.hf import load_model_and_tokenizer

    return load_model_and_tokenizer(tiny_model_dir, device=None)


PROMPTS = ["Calculate 1 + 2.", "Calculate 345 + 678 and then some more words here.", "x"]


def test_batched_greedy_equals_one_at_a_time(model_and_tok):
    model, tok = model_and_tok
    together = generate(model, tok, PROMPTS, max_new_tokens=6, sequences_per_batch=8)
    alone = [generate(model, tok, [p], max_new_tokens=6)[0] for p in PROMPTS]
    assert [[g.text for g in row] for row in together] == [[g.text for g in row] for row in alone]
    assert all(len(row) == 1 and 0 < row[0].num_tokens <= 6 for row in together)


def test_k_samples_and_order(model_and_tok):
    model, tok = model_and_tok
    out = generate(model, tok, PROMPTS, max_new_tokens=5, num_samples=3, temperature=1.0, sequences_per_batch=4, seed=1)
    assert [len(row) for row in out] == [3, 3, 3]
    again = generate(model, tok, PROMPTS, max_new_tokens=5, num_samples=3, temperature=1.0, sequences_per_batch=4, seed=1)
    assert [[g.text for g in r] for r in out] == [[g.text for g in r] for r in again]  # seeded
    with pytest.raises(ValueError, match="temperature"):
        generate(model, tok, PROMPTS, max_new_tokens=2, num_samples=2, temperature=0.0)


def _greedy_ids(model, ids: list[int], steps: int) -> list[int]:
    """Greedy decoding by hand, one full forward per token (the reference for `generate`)."""
    import torch

    out: list[int] = []
    with torch.no_grad():
        for _ in range(steps):
            out.append(int(model(input_ids=torch.tensor([ids + out])).logits[0, -1].argmax()))
    return out


def test_stops_at_eos(model_and_tok):
    model, tok = model_and_tok
    ids = tok(PROMPTS[0], add_special_tokens=False)["input_ids"]
    greedy = _greedy_ids(model, ids, 4)
    # an eos id the greedy continuation never produces: generation runs to the length limit
    unused = next(i for i in range(len(tok)) if i not in greedy)
    free = generate(model, tok, PROMPTS[:1], max_new_tokens=4, eos_token_ids=[unused])[0][0]
    assert free.finish_reason == "length" and free.num_tokens == 4
    assert free.text == tok.decode(greedy, skip_special_tokens=True)
    # make the k-th generated token a stop token: generation ends right there, the stop token included
    for k in (0, 3):
        first_at = greedy.index(greedy[k])  # an earlier equal token stops first
        stopped = generate(model, tok, PROMPTS[:1], max_new_tokens=4, eos_token_ids=[greedy[k]])[0][0]
        assert stopped.finish_reason == "stop" and stopped.num_tokens == first_at + 1
