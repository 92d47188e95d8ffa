"""Spot checks: a stratified sample of a run's scored rollouts for a human to label.

    res = spotcheck("runs/rl1", n=50, seed=0)   # {"jsonl": Path, "html": Path}
    res.skipped, res.strata                     # broken lines skipped; stratum -> (available, drawn)

Reads RUN_DIR/rollouts/*.jsonl (one JSON object per trajectory, written by the RL recipe),
puts each line in a stratum (domain, verdict) with verdict "pass" (score >= 0.5), "fail" or
"unscored" (score null or missing), and draws n lines spread as evenly as possible over the
strata (see `allocate`), reproducibly for a seed. Writes OUT_DIR (default RUN_DIR/spotcheck/):
  spotcheck.jsonl  each drawn line plus "sample_id", "source" (file:line), "label": null, "note": ""
                   -- the human fills "label" (true/false) and `calibrate.py` reads it back;
  spotcheck.html   one self-contained page (no external JS/CSS), one card per sample, with a
                   filter by domain and verdict. All text from the rollouts is html-escaped.
A line that is not a JSON object, or whose score is neither null nor a number, is skipped and
counted (never fatal); no rollout file at all is a DataError naming the directory.
The first pass keeps only byte offsets, so a large run is never held in memory.
"""

from __future__ import annotations

import html
import json
import logging
import math
import random
from pathlib import Path
from typing import Iterator

from posttrain.core.errors import DataError
from posttrain.core.fsio import atomic_file

log = logging.getLogger(__name__)
PASS_THRESHOLD = 0.5
SHOW_CHARS = 20_000  # longer prompt/completion/reference text is cut in the page (not in the JSONL)
Stratum = tuple[str, str]  # (domain, verdict)


class SpotcheckResult(dict):
    """{"jsonl": Path, "html": Path} plus what the CLI may print."""

    skipped: int  # broken lines skipped
    skipped_at: list[str]  # the first few as "file:line"
    strata: dict[Stratum, tuple[int, int]]  # (available, drawn)


def verdict_of(score) -> str | None:
    """'pass' / 'fail' / 'unscored' for a rollout line's `score`; None when it is not valid."""
    if score is None:
        return "unscored"
    if isinstance(score, bool) or not isinstance(score, (int, float)):
        return None
    if not math.isfinite(score):
        return "unscored"
    return "pass" if score >= PASS_THRESHOLD else "fail"


def rollout_files(run_dir: str | Path) -> list[Path]:
    d = Path(run_dir) / "rollouts"
    files = sorted(p for p in d.glob("*.jsonl") if p.is_file()) if d.is_dir() else []
    if not files:
        raise DataError(f"no rollout files (*.jsonl) in {d}")
    return files


def _lines(path: Path) -> Iterator[tuple[int, int, bytes]]:
    """(line number, byte offset, raw line) of each line of `path`."""
    offset = 0
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            yield lineno, offset, raw
            offset += len(raw)


def _parse(raw: bytes) -> dict | None:
    try:
        rec = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return rec if isinstance(rec, dict) else None


def index_rollouts(files: list[Path]) -> tuple[dict[Stratum, list[tuple[int, int, int]]], list[str]]:
    """stratum -> [(file index, line number, byte offset)] in file order, and the broken lines."""
    strata: dict[Stratum, list[tuple[int, int, int]]] = {}
    broken: list[str] = []
    for fi, path in enumerate(files):
        for lineno, offset, raw in _lines(path):
            if not raw.strip():
                continue
            rec = _parse(raw)
            verdict = verdict_of(rec.get("score")) if rec is not None else None
            if verdict is None:
                broken.append(f"{path}:{lineno}")
                continue
            domain = str(rec.get("domain", "?"))
            strata.setdefault((domain, verdict), []).append((fi, lineno, offset))
    return strata, broken


def allocate(sizes: dict[Stratum, int], n: int) -> dict[Stratum, int]:
    """How many to draw from each stratum: n spread as evenly as possible. A stratum smaller than
    its even share gives all it has and the rest is shared among the larger ones; what does not
    divide evenly goes one each to the largest strata (ties by stratum name)."""
    alloc = {k: 0 for k in sizes}
    left = [k for k in sizes if sizes[k] > 0]
    rem = max(0, n)
    while left and rem > 0:
        share = rem // len(left)
        small = [k for k in left if sizes[k] <= share]
        if small:
            for k in small:
                alloc[k] = sizes[k]
                rem -= sizes[k]
            left = [k for k in left if k not in small]
            continue
        extra = rem - share * len(left)
        for i, k in enumerate(sorted(left, key=lambda k: (-sizes[k], k))):
            alloc[k] = share + (i < extra)
        break
    return alloc


def _card(i: int, rec: dict, verdict: str) -> str:
    e = lambda x: html.escape(str(x), quote=True)  # noqa: E731

    def block(name: str, value) -> str:
        text = value if isinstance(value, str) else json.dumps(value, indent=1, ensure_ascii=False,
                                                               default=str)
        cut = ""
        if len(text) > SHOW_CHARS:
            cut = f'<div class="cut">... {len(text) - SHOW_CHARS} more chars in spotcheck.jsonl</div>'
            text = text[:SHOW_CHARS]
        return f"<h4>{e(name)}</h4><pre>{e(text)}</pre>{cut}"

    scores = rec.get("scores") or {}
    chips = "".join(f'<span class="chip">{e(k)} = {e(v)}</span>' for k, v in
                    (scores.items() if isinstance(scores, dict) else [("scores", scores)]))
    domain = str(rec.get("domain", "?"))
    return (
        f'<div class="card {e(verdict)}" data-domain="{e(domain)}" data-verdict="{e(verdict)}">'
        f'<div class="head"><b>#{i} {e(rec.get("sample_id", ""))}</b> · task {e(rec.get("task_id", "?"))}'
        f' · domain <b>{e(domain)}</b> · verdict <b>{e(verdict)}</b> · score {e(rec.get("score"))}'
        f' · reward {e(rec.get("reward"))} · step {e(rec.get("step", "?"))}'
        f' · finish {e(rec.get("finish_reason", "?"))} · <span class="src">{e(rec.get("source", ""))}</span></div>'
        f'<div>{chips}</div>'
        + block("prompt", rec.get("prompt", ""))
        + block("completion", rec.get("completion", ""))
        + block("reference", rec.get("reference"))
        + "</div>"
    )


_STYLE = """body{font-family:sans-serif;margin:1em;background:#fafafa}
.card{background:#fff;border:1px solid #ccc;border-left:6px solid #999;margin:.8em 0;padding:.6em}
.card.pass{border-left-color:#2a2}.card.fail{border-left-color:#c22}
pre{white-space:pre-wrap;word-break:break-all;background:#f4f4f4;padding:.4em;max-height:30em;overflow:auto}
.chip{display:inline-block;background:#eef;border-radius:4px;padding:0 .4em;margin:.2em}
h4{margin:.4em 0 .1em}.src,.cut{color:#777;font-size:.85em}"""

_SCRIPT = """function f(){var d=document.getElementById('fd').value,v=document.getElementById('fv').value,n=0;
document.querySelectorAll('.card').forEach(function(c){var s=(!d||c.dataset.domain===d)&&(!v||c.dataset.verdict===v);
c.style.display=s?'':'none';n+=s?1:0;});document.getElementById('nshown').textContent=n;}"""


def render_html(records: list[tuple[dict, str]], summary: str) -> str:
    """The page for [(line with sample_id, verdict)]."""
    e = html.escape
    options = lambda vals: "".join(f'<option value="{e(v, quote=True)}">{e(v)}</option>'  # noqa: E731
                                   for v in sorted(vals))
    domains = {str(r.get("domain", "?")) for r, _ in records}
    verdicts = {v for _, v in records}
    cards = "\n".join(_card(i, r, v) for i, (r, v) in enumerate(records, 1))
    return (
        '<!DOCTYPE html><html><head><meta charset="utf-8"><title>posttrain spot check</title>'
        f"<style>{_STYLE}</style></head><body><h2>Verifier spot check</h2><p>{e(summary)}</p>"
        f'<p>domain <select id="fd" onchange="f()"><option value="">all</option>{options(domains)}</select>'
        f' verdict <select id="fv" onchange="f()"><option value="">all</option>{options(verdicts)}</select>'
        f' · <span id="nshown">{len(records)}</span> shown. Label in spotcheck.jsonl'
        ' ("label": true when the completion is really correct).</p>'
        f"{cards}<script>{_SCRIPT}</script></body></html>\n"
    )


def spotcheck(run_dir: str | Path, n: int = 50, *, seed: int = 0,
              out_dir: str | Path | None = None) -> SpotcheckResult:
    """Draw n rollout lines stratified by (domain, verdict) and write spotcheck.jsonl + .html."""
    run_dir = Path(run_dir)
    files = rollout_files(run_dir)
    strata, broken = index_rollouts(files)
    alloc = allocate({k: len(v) for k, v in strata.items()}, n)
    rng = random.Random(seed)
    chosen: list[tuple[tuple[int, int, int], str]] = []
    for key in sorted(strata):
        picks = rng.sample(range(len(strata[key])), alloc[key])
        chosen += [(strata[key][j], key[1]) for j in sorted(picks)]
    chosen.sort(key=lambda c: c[0][:2])  # file order: (file index, line)

    records: list[tuple[dict, str]] = []
    handles: dict[int, object] = {}
    try:
        for (fi, lineno, offset), verdict in chosen:
            if fi not in handles:
                handles[fi] = open(files[fi], "rb")
            handles[fi].seek(offset)
            rec = _parse(handles[fi].readline())
            if rec is None:  # the file changed since it was indexed
                broken.append(f"{files[fi]}:{lineno}")
                continue
            rec.update(sample_id=f"s{len(records) + 1:04d}", source=f"{files[fi].name}:{lineno}",
                       label=None, note="")
            records.append((rec, verdict))
    finally:
        for f in handles.values():
            f.close()

    out = Path(out_dir) if out_dir is not None else run_dir / "spotcheck"
    total = sum(len(v) for v in strata.values())
    summary = (f"{len(records)} of {total} rollout lines from {len(files)} files in {run_dir}, seed {seed}; "
               f"{len(broken)} broken lines skipped. Strata (domain/verdict: drawn of available): "
               + ", ".join(f"{d}/{v}: {alloc[(d, v)]} of {len(strata[(d, v)])}" for d, v in sorted(strata)))
    if broken:
        log.warning("spotcheck: skipped %d broken rollout lines (first: %s)", len(broken), broken[0])
    jsonl, page = out / "spotcheck.jsonl", out / "spotcheck.html"
    with atomic_file(jsonl, "w") as f:
        for rec, _ in records:
            f.write(json.dumps(rec, ensure_ascii=False, default=str) + "\n")
    with atomic_file(page, "w") as f:
        f.write(render_html(records, summary))

    res = SpotcheckResult(jsonl=jsonl, html=page)
    res.skipped, res.skipped_at = len(broken), broken[:10]
    res.strata = {k: (len(strata[k]), alloc[k]) for k in sorted(strata)}
    return res
