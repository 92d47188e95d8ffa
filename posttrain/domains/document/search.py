"""BM25 retrieval over a report's passages: each paragraph, and each table row with its caption and header.

    index = report.index                         # built once per report (Report.index is cached)
    hits = index.search("Enterprise revenue Oceania FY2022", k=5)   # [Hit(passage, score)], best first
    format_hits(hits, query)                     # what the `search` tool shows the model

Tokens are lowercase words and numbers ("1,234.5" and "1234.5" are the same token, "v3.2" and
"fy2022" stay whole); a short stop list is dropped. Scoring is Okapi BM25 (k1 1.2, b 0.75); ties
go to the passage that comes first. A snippet is the passage's sentence(s) with the most query
words (a table row shows its caption, header and row), cut at SNIPPET_CHARS.
"""

from __future__ import annotations

import heapq
import math
import re
from dataclasses import dataclass

from posttrain.domains.document.blocks import Table

TOKEN = re.compile(r"[a-z0-9]+(?:[.,][a-z0-9]+)*")
SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9])")
STOP = frozenset("a an and are as at be by did does for from how in is it its of on or the this that to was were "
                 "what which who with".split())
SNIPPET_CHARS = 300
K1, B = 1.2, 0.75


def tokens(text: str) -> list[str]:
    out = []
    for tok in TOKEN.findall(text.lower()):
        if tok[0].isdigit():
            tok = tok.replace(",", "")
        if tok not in STOP:
            out.append(tok)
    return out


@dataclass(frozen=True)
class Passage:
    section: str
    marker: str  # "[3.2 ¶2]"
    text: str  # what is indexed and shown: a paragraph, or "caption | header | row" for a table row
    row: bool = False


@dataclass(frozen=True)
class Hit:
    passage: Passage
    score: float


class Index:
    def __init__(self, passages: list[Passage]) -> None:
        self.passages = passages
        self.postings: dict[str, list[tuple[int, int]]] = {}
        self.lengths = []
        for pid, p in enumerate(passages):
            toks = tokens(p.text)
            self.lengths.append(len(toks))
            counts: dict[str, int] = {}
            for tok in toks:
                counts[tok] = counts.get(tok, 0) + 1
            for tok, tf in counts.items():
                self.postings.setdefault(tok, []).append((pid, tf))
        self.avg = sum(self.lengths) / max(1, len(self.lengths))

    @classmethod
    def of(cls, report) -> Index:
        passages = []
        for sec in report.sections:
            for k, block in enumerate(sec.blocks, 1):
                marker = f"[{sec.id} ¶{k}]"
                if isinstance(block, Table):
                    head = f"{block.caption} {Table.line(block.header)}"
                    passages += [Passage(sec.id, marker, f"{head} {Table.line(row)}", True) for row in block.rows]
                else:
                    passages.append(Passage(sec.id, marker, block))
        return cls(passages)

    def search(self, query: str, k: int = 5) -> list[Hit]:
        n = len(self.passages)
        scores: dict[int, float] = {}
        for tok in set(tokens(query)):
            posting = self.postings.get(tok)
            if not posting:
                continue
            idf = math.log(1 + (n - len(posting) + 0.5) / (len(posting) + 0.5))
            for pid, tf in posting:
                norm = tf + K1 * (1 - B + B * self.lengths[pid] / self.avg)
                scores[pid] = scores.get(pid, 0.0) + idf * tf * (K1 + 1) / norm
        best = heapq.nsmallest(k, scores.items(), key=lambda item: (-item[1], item[0]))
        return [Hit(self.passages[pid], score) for pid, score in best]


def snippet(passage: Passage, query: str) -> str:
    """The passage's best-matching sentences (a table row whole), at most SNIPPET_CHARS."""
    text = passage.text
    if len(text) > SNIPPET_CHARS and not passage.row:
        wanted = set(tokens(query))
        sentences = SENTENCE.split(text)
        ranked = sorted(range(len(sentences)), key=lambda i: (-len(wanted & set(tokens(sentences[i]))), i))
        keep, size = [], 0
        for i in ranked:
            if keep and size + len(sentences[i]) > SNIPPET_CHARS:
                break
            keep.append(i)
            size += len(sentences[i]) + 1
        text = " ... ".join(sentences[i] for i in sorted(keep))
    return text if len(text) <= SNIPPET_CHARS else text[: SNIPPET_CHARS - 3] + "..."


def format_hits(hits: list[Hit], query: str) -> str:
    if not hits:
        return f"No passage matches {query!r}."
    return "\n".join(f"{i}. {h.passage.marker} {snippet(h.passage, query)}" for i, h in enumerate(hits, 1))
