"""The `document` task source: one long generated report per seed, a question, and a cited answer to give.

    tasks = make_source_tasks("document", n=8, seed=0, options={"level": 3})               # train seeds
    tasks = make_source_tasks("document", n=8, seed=0, options={"level": [4, 5], "split": "test", "depth": 0.9})

Levels 1-5 (domains/document/questions.py): a stated figure or name in ~5 sections; a table cell in
~12; a table reached through a cross-reference in ~36; two figures combined in ~80; a restated
figure or three figures in ~160 sections (~70k tokens). Option `depth` (float in [0, 1], default
None = drawn from the seed) places the first evidence span: 0 near the start, 1 near the end. The
Task holds the question and a small reference (seed, level, depth, the gold answer and evidence
spans); the env regenerates the report from it. Oracle: search for each evidence span, read its
section, answer with the gold value quoting the spans.
"""

from __future__ import annotations

import random
from typing import Any, Mapping

from posttrain.domains.document.env import TOOLS
from posttrain.domains.document.questions import make_question
from posttrain.domains.document.report import build_report, fact_phrase
from posttrain.core.errors import ConfigError
from posttrain.tasks.generated import OracleTurn, calls, register_generated
from posttrain.core.types import Limits, Task

LEVELS = 5
MAX_TURNS = {1: 6, 2: 6, 3: 8, 4: 10, 5: 12}


def _span(report, span) -> dict:
    query = fact_phrase(report.template, span.fact) if span.fact[0] == "num" else span.text
    return {"section": span.section, "text": span.text, "figure": span.figure, "offset": span.offset, "query": query}


def document_oracle(task: Task) -> list[OracleTurn]:
    ref = task.reference
    turns = [OracleTurn(calls(("read_section", {"section": s["section"]}))) for s in ref["support"]]
    for ev in ref["evidence"]:
        turns.append(OracleTurn(calls(("search", {"query": ev["query"], "k": 5}))))
        turns.append(OracleTurn(calls(("read_section", {"section": ev["section"]}))))
    quotes = [{"section": ev["section"], "quote": ev["text"]} for ev in ref["evidence"]]
    turns.append(OracleTurn(calls(("answer", {"answer": ref["answer"], "citations": quotes}))))
    return turns


@register_generated("document", levels=LEVELS, oracle=document_oracle, options={"depth": (float, None)},
                    description="long-document QA: retrieval tools over a generated report, answers with citations")
def document_task(seed: int, level: int, options: Mapping[str, Any]) -> Task:
    depth = options.get("depth")
    if depth is None:
        depth = random.Random(f"document-depth/{seed}/{level}").random()
    elif not 0.0 <= depth <= 1.0:
        raise ConfigError(f"document: option depth must be in [0, 1] (or null: drawn), got {depth!r}")
    report = build_report(seed, level, float(depth))
    q = make_question(report, random.Random(f"document-question/{seed}/{level}"))
    ids = [s.id for s in report.sections]
    prompt = (f"{q.text}\n\nThe document: {report.title} ({report.template.kind}, {len(ids)} sections, "
              f"{ids[0]} .. {ids[-1]}). Use toc() for its table of contents.")
    reference = {"seed": seed, "level": level, "depth": float(depth), "kind": q.kind, "answer": q.answer,
                 "value": q.value, "decimals": q.decimals, "unit": q.unit,
                 "evidence": [_span(report, s) for s in q.evidence], "support": [_span(report, s) for s in q.support]}
    limits = Limits(max_turns=MAX_TURNS[level], max_new_tokens=256 if level <= 3 else 384, seconds=60.0,
                    tool_timeout=5.0, max_observation_tokens=1024 if level <= 3 else 2048)
    return Task(id=f"document/L{level}/{seed}", domain="document", prompt=({"role": "user", "content": prompt},),
                reference=reference, verifiers=("env_score",), env="document", limits=limits,
                metadata={"tools": TOOLS, "level": level, "seed": seed, "depth": float(depth),
                          "span_depth": round(q.evidence[0].depth, 4), "kind": q.kind,
                          "template": report.template.kind, "sections": len(ids), "chars": report.chars})
