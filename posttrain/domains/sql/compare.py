"""Result-set equality, the sql env's reward: the submitted query's rows against the reference query's.

    same, why = rows_match(expected, got, ordered=has_top_level_order_by(reference_sql), decimals=2)

- Column names are ignored; the column count must match, and so must the row count.
- Order matters only when the reference orders at top level (an ORDER BY outside every
  parenthesis: the question asked for an order); otherwise rows are compared as multisets.
- Numbers compare as numbers (3 == 3.0) within rel 1e-6 / abs 1e-6; when the question asks to round
  to `decimals`, within half a unit of that decimal (an unrounded 12.3449 matches 12.34, 12.36 does
  not). NULL equals only NULL; text compares exactly; a number never equals text.
"""

from __future__ import annotations

import math
import re

REL_TOL = ABS_TOL = 1e-6
GREEDY_MAX_ROWS = 300  # multiset matching falls back to pairwise search up to this many rows
_STRINGS_AND_COMMENTS = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|--[^\n]*|/\*.*?\*/", re.S)


def has_top_level_order_by(sql: str) -> bool:
    text = _STRINGS_AND_COMMENTS.sub(" ", sql)
    depth, flat = 0, []
    for ch in text:
        depth += ch == "("
        flat.append(ch if depth == 0 else " ")
        depth -= ch == ")"
    return re.search(r"\bORDER\s+BY\b", "".join(flat), re.I) is not None


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def values_match(a, b, decimals: int | None = None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if _is_number(a) and _is_number(b):
        if isinstance(a, int) and isinstance(b, int):
            return a == b
        if not (math.isfinite(a) and math.isfinite(b)):
            return a == b
        if decimals is not None:
            return abs(a - b) <= 0.5 * 10 ** -decimals + 1e-9
        return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL)
    if _is_number(a) or _is_number(b):
        return False
    return a == b


def _row_match(a: tuple, b: tuple, decimals: int | None) -> bool:
    return all(values_match(x, y, decimals) for x, y in zip(a, b))


def _key(row: tuple, decimals: int | None) -> tuple:
    out = []
    for v in row:
        if v is None:
            out.append((0, 0))
        elif _is_number(v):
            out.append((1, round(float(v), decimals if decimals is not None else 6)))
        else:
            out.append((2 if isinstance(v, str) else 3, v))
    return tuple(out)


def _multiset_match(expected: list[tuple], got: list[tuple], decimals: int | None) -> bool:
    a, b = sorted(expected, key=lambda r: _key(r, decimals)), sorted(got, key=lambda r: _key(r, decimals))
    if all(_row_match(x, y, decimals) for x, y in zip(a, b)):
        return True
    if len(a) > GREEDY_MAX_ROWS:  # sorted on rounded keys, near-equal rows may interleave: search pairwise
        return False
    unused = list(b)
    for row in a:
        hit = next((i for i, other in enumerate(unused) if _row_match(row, other, decimals)), None)
        if hit is None:
            return False
        unused.pop(hit)
    return True


def rows_match(expected, got, *, ordered: bool, decimals: int | None = None) -> tuple[bool, str]:
    """(equal, why not): the reward's comparison (module docstring)."""
    expected, got = [tuple(r) for r in expected], [tuple(r) for r in got]
    width_e, width_g = (len(expected[0]) if expected else None), (len(got[0]) if got else None)
    if expected and got and width_e != width_g:
        return False, f"{width_g} columns, expected {width_e}"
    if len(expected) != len(got):
        return False, f"{len(got)} rows, expected {len(expected)}"
    if ordered:
        for i, (x, y) in enumerate(zip(expected, got)):
            if not _row_match(x, y, decimals):
                return False, f"row {i + 1} differs (the order is asked for)"
        return True, ""
    if not _multiset_match(expected, got, decimals):
        return False, "the rows differ"
    return True, ""
