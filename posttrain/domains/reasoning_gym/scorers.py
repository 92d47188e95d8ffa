"""The per-domain decisions taken from the audit of reasoning-gym's scorers (checked-in data; the
audit itself, `audit_domain` / `audit_all` / `write`, is audit.py, run by `posttrain tasks audit-scorers`).

    default_credit("basic_arithmetic")             # -> "full": its scorer gives wrong answers credit
    item_seconds("knight_swap")                    # -> measured seconds per generated item

reasoning-gym's own `score_answer` gives partial credit to wrong answers on many domains (the base
scorer: gold contained in a longer answer scores len(gold)/len(answer); basic_arithmetic: `-3`
against `3` scores 0.5; others 0.01 for any well-formed answer). The audit scores, per item, the gold
answer and typical wrong answers: `empty`, `other` (another item's gold), `edit` (gold with one
character changed), `negate` (a numeric gold negated), `junk` (gold followed by words); and two
variants of the gold that are often still right, shown but not counted as wrong: `case` (case
swapped), `spaced` (spaces doubled). A cell is the most any item gave that answer.

Decision (`credit`): "full" (reward 1 only for full marks, `reasoning_gym.score`) where any wrong
answer got credit in (0, 1); "partial" where wrong answers scored 0 on every probe (the scorer is
all-or-nothing there, so the raw score already means correct) or where the gold itself scores below 1
(full-marks-only would fail correct answers). The data lives in rg_scorers.json next to this file
and is read, never recomputed, at run time; a domain missing from it defaults to "full".
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

DATA = Path(__file__).with_name("scorers.json")
DOC = Path(__file__).resolve().parents[3] / "docs" / "scorers.md"
AUDIT_SEED = 123_000  # training-range items: the audit never reads eval items
# Domains without a gold answer to probe with (checker-scored): decided from reading their scorers.
NO_GOLD = {
    "boxnet": ("partial", "no gold answer; its score is the fraction of boxes the plan moves to their goals "
                          "(0.05 at least for a parseable plan): partial credit measures progress"),
    "rush_hour": ("full", "no gold answer; its scorer gives 0.01 to a well-formed plan that leaves the board unsolved"),
}
WRONG = ("empty", "other", "edit", "negate", "junk")
VARIANTS = ("case", "spaced")


@lru_cache(maxsize=1)
def _data() -> dict[str, Any]:
    try:
        return json.loads(DATA.read_text())
    except (OSError, ValueError):
        return {"domains": {}}


def decisions() -> dict[str, dict[str, Any]]:
    """The checked-in audit rows by domain."""
    return dict(_data().get("domains", {}))


def default_credit(domain: str) -> str:
    """The checked-in credit decision for `domain` ("full" when it was never audited)."""
    return str(decisions().get(domain, {}).get("credit", "full"))


def item_seconds(domain: str) -> float:
    """Checked-in seconds to generate one item of `domain` (0.0 when never measured)."""
    return float(decisions().get(domain, {}).get("seconds_per_item", 0.0))
