"""pass@k by hand: 1 - C(n-c, k) / C(n, k)."""

from __future__ import annotations

from math import comb

import pytest

from posttrain.eval.passk import pass_at_k


@pytest.mark.parametrize(
    "n, c, k, expected",
    [
        (5, 2, 1, 0.4),  # c / n
        (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
        (5, 0, 3, 0.0),  # nothing correct
        (5, 3, 3, 1.0),  # n - c = 2 < k: every draw of 3 holds a correct one
        (5, 5, 1, 1.0),
        (4, 1, 4, 1.0),
        (10, 3, 5, 1 - 21 / 252),  # 1 - C(7,5)/C(10,5)
        (1, 1, 1, 1.0),
        (1, 0, 1, 0.0),
    ],
)
def test_pass_at_k_by_hand(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_stable_for_large_n_and_matches_binomials():
    for n, c, k in [(200, 13, 10), (1000, 1, 100), (60, 30, 30)]:
        exact = 1 - comb(n - c, k) / comb(n, k)
        assert pass_at_k(n, c, k) == pytest.approx(exact, rel=1e-9)
    assert 0.0 <= pass_at_k(10_000, 1, 1) == pytest.approx(1e-4)


@pytest.mark.parametrize("n, c, k", [(5, 6, 1), (5, -1, 1), (5, 2, 0), (5, 2, 6)])
def test_invalid_arguments(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)
