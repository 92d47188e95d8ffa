"""Example completions in report.html: per stage and domain, a few correct and a few incorrect held-out
completions of a suite, read from the `LABEL.completions.jsonl` that `posttrain eval` writes next to
each LABEL.json (posttrain.eval.run: one line per sample with id, domain, completion, score, correct,
finish_reason, num_tokens), and what every completion of that stage and domain did: how many were
correct, empty, or stopped at the token cap (finish_reason "length").

    samples = suite_samples(suite)              # label -> domain -> DomainSamples
    notes = completion_notes(samples, suite)    # (label, domain) -> "40 of 100 empty; ..." (the stage table)
    html = render_examples(suite, samples)

Bounded: at most MAX_LINES lines of a file are read (a line over MAX_LINE_CHARS is skipped), PER_KIND
correct ("best": the first ones, in task order) and PER_KIND incorrect ("worst": lowest score first)
are kept per domain, each shown cut to MAX_CHARS, HTML-escaped; at most MAX_DOMAINS domains per stage.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posttrain.telemetry.report.html import e, fmt, is_num
from posttrain.telemetry.report.suites import Suite

PER_KIND = 2
MAX_LINES = 200_000
MAX_LINE_CHARS = 200_000
MAX_CHARS = 400
MAX_DOMAINS = 12


@dataclass
class DomainSamples:
    total: int = 0
    correct: int = 0
    empty: int = 0
    capped: int = 0  # stopped at the token cap
    best: list[dict[str, Any]] = field(default_factory=list)
    worst: list[dict[str, Any]] = field(default_factory=list)


def completions_file(eval_json: Path) -> Path:
    """LABEL.json -> LABEL.completions.jsonl (posttrain.eval.run.completions_path)."""
    return eval_json.with_name(eval_json.stem + ".completions.jsonl")


def _score(rec: dict[str, Any]) -> float:
    return float(rec["score"]) if is_num(rec.get("score")) else 0.0


def read_samples(path: Path, per_kind: int = PER_KIND, max_lines: int = MAX_LINES) -> dict[str, DomainSamples]:
    """domain -> DomainSamples of one completions file ({} when it is missing or unreadable)."""
    out: dict[str, DomainSamples] = {}
    try:
        with path.open(encoding="utf-8", errors="replace") as fh:
            for i, line in enumerate(fh):
                if i >= max_lines:
                    break
                if len(line) > MAX_LINE_CHARS:
                    continue
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(rec, dict) or not isinstance(rec.get("completion"), str):
                    continue
                ds = out.setdefault(str(rec.get("domain", "?")), DomainSamples())
                ds.total += 1
                ds.empty += not rec["completion"].strip()
                ds.capped += rec.get("finish_reason") == "length"
                if rec.get("correct") is True:
                    ds.correct += 1
                    if len(ds.best) < per_kind:
                        ds.best.append(rec)
                else:
                    ds.worst = sorted(ds.worst + [rec], key=_score)[:per_kind]  # stable: task order on ties
    except OSError:
        return {}
    return out


def suite_samples(suite: Suite) -> dict[str, dict[str, DomainSamples]]:
    """label -> domain -> DomainSamples, for each model of the suite whose completions file exists."""
    out = {}
    for label in suite.labels:
        path = suite.files.get(label)
        found = read_samples(completions_file(path)) if path is not None else {}
        if found:
            out[label] = found
    return out


def _max_tokens(suite: Suite, label: str) -> Any:
    return suite.evals.get(label, {}).get("max_tokens")


def _cap_text(suite: Suite, label: str) -> str:
    cap = _max_tokens(suite, label)
    return f"the {fmt(cap)}-token cap" if is_num(cap) else "the token cap"


def completion_notes(samples: dict[str, dict[str, DomainSamples]], suite: Suite) -> dict[tuple[str, str], str]:
    """(label, domain) -> what was wrong with the completions ('' problems are left out)."""
    notes = {}
    for label, domains in samples.items():
        for domain, ds in domains.items():
            parts = []
            if ds.empty:
                parts.append(f"{ds.empty} of {ds.total} completions empty")
            if ds.capped:
                parts.append(f"{ds.capped} of {ds.total} hit {_cap_text(suite, label)}")
            if parts:
                notes[(label, domain)] = "; ".join(parts)
    return notes


def _row(rec: dict[str, Any], cap: str) -> str:
    text = rec["completion"]
    shown = e(text[:MAX_CHARS]) + ("…" if len(text) > MAX_CHARS else "")
    body = '<span class="fail">EMPTY</span>' if not text.strip() else f'<pre class="completion">{shown}</pre>'
    verdict = '<span class="pass">correct</span>' if rec.get("correct") is True else '<span class="neg">wrong</span>'
    finish = f'<span class="fail">hit {e(cap)}</span>' if rec.get("finish_reason") == "length" else e(
        fmt(rec.get("finish_reason")))
    return (f"<tr><td>{e(fmt(rec.get('id')))}</td><td>{verdict}</td><td>{e(fmt(rec.get('score')))}</td>"
            f"<td>{e(fmt(rec.get('num_tokens')))}</td><td>{finish}</td><td>{body}</td></tr>")


def _stage(suite: Suite, label: str, domains: dict[str, DomainSamples]) -> str:
    cap = _cap_text(suite, label)
    head = "<tr><th>task</th><th>verdict</th><th>score</th><th>tokens</th><th>finish</th><th>completion</th></tr>"
    out = []
    for domain in sorted(domains)[:MAX_DOMAINS]:
        ds = domains[domain]
        summary = (f"{ds.correct} of {ds.total} correct, {ds.empty} empty, {ds.capped} hit {cap}")
        rows = "".join(_row(r, cap) for r in ds.best + ds.worst)
        out.append(f'<h4>{e(label)} — {e(domain)}: <span class="meta">{e(summary)}</span></h4>'
                   f'<table class="examples"><thead>{head}</thead><tbody>{rows}</tbody></table>')
    if len(domains) > MAX_DOMAINS:
        out.append(f'<p class="note">{len(domains) - MAX_DOMAINS} more domains not shown.</p>')
    return "\n".join(out)


def render_examples(suite: Suite, samples: dict[str, dict[str, DomainSamples]]) -> str:
    """Per stage (a <details>, open) its best and worst completions per domain."""
    if not samples:
        return ""
    out = [f"<h3>Example completions: suite {e(suite.name)} (best and worst per stage and domain)</h3>"]
    for label in (lab for lab in suite.labels if lab in samples):
        out.append(f"<details open><summary>{e(label)}</summary>"
                   + _stage(suite, label, samples[label]) + "</details>")
    return "\n".join(out)
