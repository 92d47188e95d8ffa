"""The scorer audit behind `posttrain tasks audit-scorers`: reasoning-gym's gold answers and typical wrong
answers (empty, another item's answer, one character changed, negated, gold plus junk) scored per domain,
the credit each domain's scorer gives wrong answers, written to scorers.json and docs/scorers.md."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from posttrain.domains.reasoning_gym import source as rg
from posttrain.domains.reasoning_gym.scorers import AUDIT_SEED, DATA, DOC, NO_GOLD, VARIANTS, WRONG, _data

def _edit(gold: str) -> str:
    """`gold` with one character changed: its last digit bumped, else its last letter, else 'x' added."""
    for i in range(len(gold) - 1, -1, -1):
        c = gold[i]
        if c.isdigit():
            return gold[:i] + str((int(c) + 1) % 10) + gold[i + 1:]
    for i in range(len(gold) - 1, -1, -1):
        c = gold[i]
        if c.isalpha():
            new = "b" if c.lower() == "a" else "a"
            return gold[:i] + (new.upper() if c.isupper() else new) + gold[i + 1:]
    return gold + "x"


_NUMBER = re.compile(r"^[-+]?\d+(\.\d+)?(/\d+)?$")


def probes(gold: str | None, other: str | None) -> dict[str, str | None]:
    """The answers the audit scores for one item (None: does not apply to this gold)."""
    g = None if gold is None else gold.strip()
    num = g is not None and bool(_NUMBER.match(g.replace(",", "")))
    return {
        "gold": g,
        "empty": "",
        "other": other if other is not None and other.strip() != g else None,
        "edit": _edit(g) if g else None,
        "negate": (g[1:] if g.startswith("-") else "-" + g.lstrip("+")) if num else None,
        "junk": f"{g} is my final answer, I think" if g else None,
        "case": g.swapcase() if g and g.swapcase() != g else None,
        "spaced": g.replace(" ", "  ") if g and " " in g else None,
    }


def audit_domain(name: str, n: int = 10, seed: int = AUDIT_SEED) -> dict[str, Any]:
    """One table row for `name`: the highest score any of `n` items gave each probe (None: no item had
    it), `max_wrong` over the wrong probes, `partial` (a wrong answer got credit in (0, 1)), the chosen
    `credit`, its reason, and the measured `seconds_per_item` of generating the items."""
    from posttrain.domains.reasoning_gym import build as rg_build
    rg.make_tasks(name, 1, seed + 10 * n)  # imports and one-off set-up are not per-item cost
    clock = rg_build.timed()
    tasks = rg.make_tasks(name, n, seed)
    seconds = clock() / n
    golds = [rg.gold_answer(t) for t in tasks]
    best: dict[str, float | None] = {k: None for k in ("gold", *WRONG, *VARIANTS)}
    gold_min = None
    for i, task in enumerate(tasks):
        other = next((g for g in golds[i + 1:] + golds[:i] if g is not None and g != golds[i]), None)
        for kind, answer in probes(golds[i], other).items():
            if answer is None:
                continue
            value = rg.raw_score(task, f"{rg.ANSWER_TAG} {answer}" if answer else "")
            best[kind] = value if best[kind] is None else max(best[kind], value)
            if kind == "gold":
                gold_min = value if gold_min is None else min(gold_min, value)
    wrong = [best[k] for k in WRONG if best[k] is not None]
    max_wrong = max(wrong) if wrong else 0.0
    partial = any(0.0 < v < 1.0 for v in wrong)
    if gold_min is None and name in NO_GOLD:
        credit, why = NO_GOLD[name]
    elif gold_min is None:
        credit, why = "full", "no gold answer to probe with: full marks only, to be safe"
    elif gold_min < 1.0:
        credit, why = "partial", "the gold answer scores below 1: full-marks-only would fail correct answers"
    elif partial:
        credit, why = "full", "wrong answers get partial credit: reward 1 only for full marks"
    elif max_wrong >= 1.0:
        credit, why = "partial", "no partial credit seen; a probe scored 1 (an alternative valid answer or a lenient check)"
    else:
        credit, why = "partial", "all-or-nothing on every probe: the raw score already means correct"
    return {"domain": name, "n": n, **{k: None if v is None else round(v, 4) for k, v in best.items()},
            "gold_min": gold_min, "max_wrong": round(max_wrong, 4), "partial": partial, "credit": credit,
            "why": why, "seconds_per_item": round(seconds, 5)}


def audit_all(n: int = 10, domains: list[str] | None = None, progress=None) -> list[dict[str, Any]]:
    """`audit_domain` for every reasoning-gym domain (or `domains`); a domain whose items cannot be
    built gets a row with `error` set and credit "full"."""
    rows = []
    for name in domains or rg.list_domains():
        try:
            row = audit_domain(name, n)
        except Exception as e:  # noqa: BLE001 - one broken domain must not stop the audit
            row = {"domain": name, "n": n, "credit": "full", "error": f"{type(e).__name__}: {e}"[:200],
                   "why": "could not be audited", "seconds_per_item": 0.0}
        rows.append(row)
        if progress:
            progress(row)
    return rows


def _cell(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def markdown(rows: list[dict[str, Any]]) -> str:
    """docs/scorers.md: what was probed, the counts and one table row per domain."""
    import reasoning_gym

    partial = [r for r in rows if r.get("partial")]
    full = [r for r in rows if r.get("credit") == "full"]
    head = ["domain", "gold", *WRONG, *VARIANTS, "max wrong", "default", "s/item", "why"]
    lines = [
        "# reasoning-gym scorers: audit and default credit",
        "",
        f"Generated by `posttrain tasks audit-scorers --write` (posttrain/domains/reasoning_gym/scorers.py) on reasoning-gym "
        f"{getattr(reasoning_gym, '__version__', '?')}, {rows[0]['n'] if rows else 0} items per domain "
        f"(seeds from {AUDIT_SEED}). Each cell is the highest score reasoning-gym's own `score_answer` gave that "
        "answer on any item (– : no item had one, e.g. `negate` needs a numeric gold).",
        "",
        "Wrong answers: `empty`; `other` (another item's gold); `edit` (gold with one character changed); "
        "`negate` (numeric gold negated); `junk` (gold followed by words). Gold variants that are often still "
        "right, shown but not counted as wrong: `case` (case swapped), `spaced` (spaces doubled).",
        "",
        f"**{len(partial)} of {len(rows)} domains give a wrong answer partial credit** (a score in (0, 1)); "
        f"{len(full)} default to `full` credit: the `reasoning_gym` verifier rewards 1 only for full marks, "
        "else 0. `partial` keeps the raw score, where it already means correct (all-or-nothing on every probe) "
        "or where the gold itself scores below 1, and on `boxnet`, whose score is the fraction of boxes a plan "
        "delivers (progress). Elsewhere the credit went to answers that are simply wrong (gold with junk, "
        "edits, another item's answer, a well-formed guess), not to partly solved problems.",
        "",
        "Override per domain in a config: `verifier_options: {reasoning_gym: {credit: partial}}` (or `full`). "
        "The decisions are data (posttrain/domains/reasoning_gym/scorers.json), read at run time, never recomputed; "
        "`s/item` (seconds to generate an item, measured with the audit) sets the held-out size of slow "
        "domains (`reasoning_gym.holdout_size`).",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['domain']} | " + " | ".join(["–"] * (len(head) - 3)) + f" | full | – | {r['error']} |")
            continue
        cells = [r["domain"], *(_cell(r.get(k)) for k in ("gold", *WRONG, *VARIANTS)), _cell(r["max_wrong"]),
                 f"**{r['credit']}**" if r["credit"] == "full" else r["credit"], _cell(r["seconds_per_item"]), r["why"]]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def write(rows: list[dict[str, Any]], data: Path = DATA, doc: Path | None = DOC) -> None:
    """Write the decisions (rg_scorers.json) and, unless `doc` is None, the docs table."""
    import reasoning_gym

    payload = {"reasoning_gym_version": getattr(reasoning_gym, "__version__", "?"), "audit_seed": AUDIT_SEED,
               "domains": {r["domain"]: r for r in rows}}
    data.write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")
    if doc is not None:
        doc.write_text(markdown(rows))
    _data.cache_clear()
