"""`posttrain eval`'s paged engine drafts whenever no request waits for a batch slot (eval/run.py
`build_engine`), and the drafts change no completion: the same greedy records with speculation off."""

from __future__ import annotations

from posttrain.config.eval import EvalConfig
from posttrain.domains.reasoning_gym.source import make_tasks
from posttrain.eval.evaluate import evaluate_tasks
from posttrain.eval.run import build_engine, stop_ids


def _eval(cfg, tokenizer, tasks):
    engine = build_engine(cfg, tokenizer)
    result = evaluate_tasks(engine, tokenizer, tasks, samples=1, temperature=0.0, max_tokens=24,
                            stop_ids=stop_ids(tokenizer, engine.model), seed=1_000_000)
    return engine, [(r.completion, r.num_tokens, r.finish_reason) for r in result.records]


def test_eval_engine_drafts_and_keeps_the_greedy_completions(tiny_model_dir, tiny_tokenizer):
    tasks = [t for d in ("basic_arithmetic", "chain_sum") for t in make_tasks(d, 3, 1_000_000)]
    cfg = EvalConfig(model=tiny_model_dir, engine="paged", batch_size=3, dtype="float32")
    drafted, records = _eval(cfg, tiny_tokenizer, tasks)
    assert drafted.propose.max_running == 3  # the batch size: drafts once nothing waits for a slot
    stats = drafted.propose.stats()
    assert stats.proposed > 0 and stats.accepted > 0  # a random tiny model repeats itself: drafts hit
    plain, plain_records = _eval(cfg.model_copy(update={"engine_options": {"speculative": None}}), tiny_tokenizer, tasks)
    assert plain.propose is None
    assert records == plain_records and any(n == 24 for _, n, _ in records)
