"""Exact and near duplicates among task texts, and leakage of eval items into train.

    normalise("What is 2.5 + 3?  ")                 # -> "what is 2.5 + 3"
    deduplicate(["What is 2+3?", "what is 2+3"])     # -> [Match(item=1, of=0, kind="exact", similarity=1.0)]
    find_leaks(train_texts, eval_texts)              # -> a Match per eval item found in train

Two texts are *exact* duplicates when their normalised forms are equal: case, runs of whitespace
and sentence punctuation (. , ; : ! ? quotes) are ignored; symbols that can change a problem
(+ - * / = ( ), a decimal point or thousands comma between digits) are kept, so "2+3" and
"2-3" stay different. They are *near* duplicates when the Jaccard similarity of their sets of
word 3-grams (`NGRAM`) is at least the threshold (default 0.8); a text shorter than 3 words is
one gram, so it can only match exactly. Word 3-grams rather than longer ones because task texts
are short: a 40-word question with one word changed keeps 35 of its 38 trigrams (J = 0.85), while
two short questions that differ in one number ("... in 2 hours" / "... in 3 hours") fall well
below 0.8.

Near matches are found by prefix filtering, not by comparing all pairs: two sets with J >= t
share a gram among the rarest len - ceil(t * len) + 1 grams of each, so only the sets indexed
under those grams are compared.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter, defaultdict
from dataclasses import dataclass

NGRAM = 3
DEFAULT_NEAR_THRESHOLD = 0.8
_PUNCT = re.compile(r"[.,](?!\d)|(?<!\d)[.,]|[;:!?\"'`\u2018\u2019\u201c\u201d\u00ab\u00bb\u00bf\u00a1\u2026]")


@dataclass(frozen=True)
class Match:
    item: int  # index of the duplicate (or of the leaked eval item)
    of: int  # index of the item it repeats (kept; for leaks, a train index)
    kind: str  # "exact" | "near"
    similarity: float  # Jaccard of the n-gram sets (1.0 for exact)


def normalise(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).lower()
    return " ".join(_PUNCT.sub(" ", text).split())


def ngrams(normalised: str, n: int = NGRAM) -> frozenset[str]:
    words = normalised.split()
    if len(words) < n:
        return frozenset({" ".join(words)})
    return frozenset(" ".join(words[i : i + n]) for i in range(len(words) - n + 1))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


class NearIndex:
    """Gram sets added under a key; `find` returns the most similar one with J >= threshold."""

    def __init__(self, threshold: float, every: list[frozenset[str]]):
        if not 0 < threshold <= 1:
            raise ValueError(f"near threshold must be in (0, 1], got {threshold}")
        self.threshold = threshold
        counts = Counter(g for grams in every for g in grams)
        self._rank = {g: (c, g) for g, c in counts.items()}  # rarest first: fewest candidates
        self._sets: dict[int, frozenset[str]] = {}
        self._index: dict[str, list[int]] = defaultdict(list)

    def _prefix(self, grams: frozenset[str]) -> list[str]:
        ordered = sorted(grams, key=lambda g: self._rank.get(g, (0, g)))
        return ordered[: len(ordered) - math.ceil(self.threshold * len(ordered) - 1e-9) + 1]

    def add(self, key: int, grams: frozenset[str]) -> None:
        self._sets[key] = grams
        for g in self._prefix(grams):
            self._index[g].append(key)

    def find(self, grams: frozenset[str]) -> tuple[int, float] | None:
        """(key, similarity) of the most similar set with J >= threshold (ties: the first added), else None."""
        candidates = sorted({k for g in self._prefix(grams) for k in self._index.get(g, ())})
        best: tuple[int, float] | None = None
        for key in candidates:
            sim = jaccard(grams, self._sets[key])
            if sim >= self.threshold - 1e-12 and (best is None or sim > best[1]):
                best = (key, sim)
        return best


def deduplicate(texts: list[str], threshold: float = DEFAULT_NEAR_THRESHOLD) -> list[Match]:
    """One Match per text that repeats an earlier kept text (the first of each cluster is kept)."""
    keys = [normalise(t) for t in texts]
    grams = [ngrams(k) for k in keys]
    index = NearIndex(threshold, grams)
    first: dict[str, int] = {}
    out: list[Match] = []
    for i, (key, g) in enumerate(zip(keys, grams)):
        if key in first:
            out.append(Match(i, first[key], "exact", 1.0))
            continue
        hit = index.find(g)
        if hit is not None:
            out.append(Match(i, hit[0], "near", hit[1]))
            continue
        first[key] = i
        index.add(i, g)
    return out


def find_leaks(train: list[str], evals: list[str], threshold: float = DEFAULT_NEAR_THRESHOLD) -> list[Match]:
    """One Match per eval text that equals (normalised) or nearly matches a train text."""
    train_keys, eval_keys = [normalise(t) for t in train], [normalise(t) for t in evals]
    train_grams, eval_grams = [ngrams(k) for k in train_keys], [ngrams(k) for k in eval_keys]
    index = NearIndex(threshold, train_grams + eval_grams)
    for j, g in enumerate(train_grams):
        index.add(j, g)
    first = {key: j for j, key in reversed(list(enumerate(train_keys)))}
    out: list[Match] = []
    for i, (key, g) in enumerate(zip(eval_keys, eval_grams)):
        if key in first:
            out.append(Match(i, first[key], "exact", 1.0))
        elif (hit := index.find(g)) is not None:
            out.append(Match(i, hit[0], "near", hit[1]))
    return out
