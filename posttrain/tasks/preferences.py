"""Synthetic preference pairs with a known ground truth, made locally from a seed.

    records = make_preferences(["correct_vs_wrong", "polite_vs_curt"], n=2000, seed=0)
    held = make_preferences(["correct_vs_wrong"], n=200, seed=0 + EVAL_SEED_OFFSET)   # disjoint questions
    write_jsonl(records, "pairs.jsonl")
    kto = unpaired(records)          # chosen -> label True, rejected -> label False
    load_pairs("pref:correct_vs_wrong,polite_vs_curt:2000", tok, seed=0)   # the same, via train/pairs.py

Kinds (each record also has `kind`, and `answer`, the true result):
- correct_vs_wrong:   "What is 23 + 58?"  chosen "23 + 58 = 81. Answer: 81", rejected the same with a wrong sum;
- concise_vs_rambling: "What is 7 times 12?" chosen the short answer, rejected the same answer buried in filler;
- polite_vs_curt:     "What is 90 minus 35?" chosen a polite answer, rejected a curt one, same result;
- gym_DOMAIN (any reasoning-gym domain, e.g. gym_chain_sum): the domain's own prompt, chosen its
  correct worked answer (what `gym:` SFT data trains on), rejected a plausible wrong one (a slipped
  step carried through, tasks/worked.py `wrong_steps`); `options` are the domain's reasoning-gym
  options, plus `holdout` (how many eval items' questions to skip, as an RL domain's `holdout`).
  Training seeds only (the eval seeds' held-out questions are skipped, as for `gym:`).

Held-out sets: train with seed s, evaluate with seed s + EVAL_SEED_OFFSET. The question space
is cut in two by a hash of the question (one in EVAL_SHARE goes to eval), and a seed at or above
EVAL_SEED_OFFSET draws only eval questions, below it only train questions, so no eval question
is ever a training question, whatever the two n. Within one set questions do not repeat.
"""

from __future__ import annotations

import json
import random
import zlib
from pathlib import Path
from typing import Callable

from posttrain.core.errors import DataError
from posttrain.core.registry import Registry

EVAL_SEED_OFFSET = 1_000_000
EVAL_SHARE = 5  # one question in EVAL_SHARE belongs to the held-out side

_FILLER = [
    "well, that is a good question and there is a lot to say about it.",
    "let me think about this for a moment before i get to the point.",
    "numbers have a long history and people have used them for a very long time.",
    "first of all, it helps to remember what multiplication means in general.",
    "some people like to work this out on paper, others in their head.",
    "i will try to be as clear as i can, so bear with me here.",
    "anyway, to make a long story short, here is what we get.",
    "i hope this long explanation makes things clearer for you.",
]
_POLITE_OPEN = ["of course!", "happy to help!", "great question!", "sure, glad you asked."]
_POLITE_CLOSE = ["i hope that helps.", "let me know if you need anything else.", "thanks for asking!"]
_CURT = ["obviously.", "do not waste my time.", "figure it out yourself next time.", "that was easy, come on."]


def _is_eval(kind: str, key: str) -> bool:
    return zlib.crc32(f"{kind}:{key}".encode()) % EVAL_SHARE == 0


def _draw(kind: str, n: int, seed: int, pick: Callable[[random.Random], tuple]) -> list[tuple]:
    """n draws of `pick` ((a, b, extra): the question is (a, b)) with distinct questions, all on this
    seed's side of the train/eval split."""
    rng = random.Random(f"{kind}:{seed}")
    held_out = seed >= EVAL_SEED_OFFSET
    seen: set[tuple] = set()
    out = []
    for _ in range(100 * n + 1000):
        if len(out) == n:
            break
        q = pick(rng)
        key = q[:2]
        if key in seen or _is_eval(kind, repr(key)) != held_out:
            continue
        seen.add(key)
        out.append(q)
    if len(out) < n:
        raise ValueError(f"{kind}: cannot draw {n} distinct questions")
    return out


def pair_record(kind: str, question: str, chosen: str, rejected: str, answer: int, conversational: bool) -> dict:
    if conversational:
        return {"prompt": [{"role": "user", "content": question}],
                "chosen": [{"role": "assistant", "content": chosen}],
                "rejected": [{"role": "assistant", "content": rejected}], "kind": kind, "answer": answer}
    return {"prompt": question, "chosen": chosen, "rejected": rejected, "kind": kind, "answer": answer}


def correct_vs_wrong(n: int, seed: int, *, conversational: bool = True) -> list[dict]:
    """Sums of two numbers: chosen has the true sum, rejected a wrong one in the same form."""
    out = []
    for a, b, delta in _draw("correct_vs_wrong", n, seed, lambda r: (r.randint(10, 999), r.randint(10, 999),
                                                                     r.choice([-100, -10, -2, -1, 1, 2, 10, 100]))):
        s = a + b
        wrong = s + delta
        out.append(pair_record("correct_vs_wrong", f"What is {a} + {b}?", f"{a} + {b} = {s}. Answer: {s}",
                           f"{a} + {b} = {wrong}. Answer: {wrong}", s, conversational))
    return out


def concise_vs_rambling(n: int, seed: int, *, conversational: bool = True) -> list[dict]:
    """Products: chosen the short direct answer, rejected the same answer buried in filler."""
    out = []
    for a, b, f in _draw("concise_vs_rambling", n, seed, lambda r: (r.randint(2, 99), r.randint(2, 99),
                                                                    r.randrange(10**6))):
        p = a * b
        fr = random.Random(f)
        before, after = fr.sample(_FILLER, 3), fr.sample(_FILLER, 2)
        answer = f"{a} times {b} is {p}."
        out.append(pair_record("concise_vs_rambling", f"What is {a} times {b}?", f"{answer} Answer: {p}",
                           " ".join([*before, answer, *after, f"Answer: {p}"]), p, conversational))
    return out


def polite_vs_curt(n: int, seed: int, *, conversational: bool = True) -> list[dict]:
    """Differences: chosen says the result politely, rejected curtly or rudely."""
    out = []
    for a, b, f in _draw("polite_vs_curt", n, seed, lambda r: (r.randint(50, 999), r.randint(1, 49),
                                                               r.randrange(10**6))):
        d = a - b
        fr = random.Random(f)
        answer = f"{a} minus {b} is {d}."
        chosen = f"{fr.choice(_POLITE_OPEN)} {answer} {fr.choice(_POLITE_CLOSE)}"
        rejected = f"{answer} {fr.choice(_CURT)}"
        out.append(pair_record("polite_vs_curt", f"What is {a} minus {b}?", chosen, rejected, d, conversational))
    return out


KINDS: dict[str, Callable[..., list[dict]]] = {
    "correct_vs_wrong": correct_vs_wrong,
    "concise_vs_rambling": concise_vs_rambling,
    "polite_vs_curt": polite_vs_curt,
}


# prefix -> fn(domain, n, seed, *, conversational, options): kinds "PREFIX_DOMAIN" (a domain's own pairs,
# registered by name from its package: "gym" -> domains/reasoning_gym/pairs.py)
FAMILIES = Registry("preference family")


def _family(kind: str) -> str | None:
    prefix, sep, _ = kind.partition("_")
    return prefix if sep and prefix in FAMILIES else None


def make_preferences(kinds: list[str], n: int, seed: int, *, conversational: bool = True,
                     options: dict[str, dict] | None = None) -> list[dict]:
    """n records split evenly over `kinds` (the first kinds get one more where n does not divide), shuffled.
    `options`: reasoning-gym options per domain, for gym_DOMAIN kinds."""
    unknown = [k for k in kinds if k not in KINDS and _family(k) is None]
    if unknown or not kinds:
        raise ValueError(f"unknown preference kind {unknown[0] if unknown else ''!r} "
                         f"(known: {', '.join([*KINDS, *(f + '_DOMAIN' for f in FAMILIES)])})")
    out = []
    for i, kind in enumerate(kinds):
        count = n // len(kinds) + (i < n % len(kinds))
        family = None if kind in KINDS else _family(kind)
        if family is not None:
            domain = kind[len(family) + 1:]
            out += FAMILIES.get(family)(domain, count, seed, conversational=conversational,
                                        options=(options or {}).get(domain))
        else:
            out += KINDS[kind](count, seed, conversational=conversational)
    random.Random(f"mix:{seed}").shuffle(out)
    return out


def records_from_spec(spec: str, seed: int = 0, options: dict[str, dict] | None = None) -> list[tuple[str, dict]]:
    """'KIND[,KIND...]:N' -> (where 'pref:KIND#i', record) of `make_preferences` (ValueError if malformed)."""
    kinds_part, sep, n_part = spec.rpartition(":")
    kinds = [k.strip() for k in kinds_part.split(",") if k.strip()]
    if not sep or not kinds or not n_part.isdigit() or int(n_part) <= 0:
        raise ValueError("expected pref:KIND[,KIND...]:N with N > 0, e.g. pref:correct_vs_wrong:2000")
    counts: dict[str, int] = {}
    out = []
    for record in make_preferences(kinds, int(n_part), seed, options=options):
        i = counts[record["kind"]] = counts.get(record["kind"], 0) + 1
        out.append((f"pref:{record['kind']}#{i}", record))
    return out


def preference_records(spec: str, seed: int = 0, options: dict[str, dict] | None = None) -> list[tuple[str, dict]] | None:
    """The (where, record) of a `pref:KIND[,KIND...]:N` data spec (a DataError naming the spec when
    malformed), for `train.pairs.load_pairs(spec, tok, records=...)`; None for any other spec (a
    file or `hf:` dataset, which load_pairs reads itself)."""
    if not spec.startswith("pref:"):
        return None
    try:
        return records_from_spec(spec[5:], seed, options)
    except ValueError as e:
        raise DataError(f"{spec}: {e}") from None


def unpaired(records: list[dict]) -> list[dict]:
    """Pairs -> KTO records: {prompt, completion: chosen, label: True} and {..., rejected, label: False}."""
    out = []
    for r in records:
        if r.get("prompt") is None:
            raise ValueError("unpaired() needs records with an explicit 'prompt'")
        extra = {k: v for k, v in r.items() if k not in ("prompt", "chosen", "rejected", "margin")}
        out.append({"prompt": r["prompt"], "completion": r["chosen"], "label": True, **extra})
        out.append({"prompt": r["prompt"], "completion": r["rejected"], "label": False, **extra})
    return out


def write_jsonl(records: list[dict], path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    return p
