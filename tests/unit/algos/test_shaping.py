"""Reward shaping terms against hand-computed values."""

from __future__ import annotations

import pytest

from posttrain.algos.shaping import format_reward, length_penalty, overlong_penalty


def test_overlong_penalty_hand_computed():
    # max 100, buffer 20: free up to 80 tokens, then linear to -1 at 100, -1 beyond
    assert overlong_penalty(50, 100, 20) == 0.0
    assert overlong_penalty(80, 100, 20) == 0.0
    assert overlong_penalty(90, 100, 20) == pytest.approx(-0.5)  # (80 - 90) / 20 = -0.5
    assert overlong_penalty(95, 100, 20) == pytest.approx(-0.75)  # (80 - 95) / 20
    assert overlong_penalty(100, 100, 20) == pytest.approx(-1.0)
    assert overlong_penalty(101, 100, 20) == -1.0
    assert overlong_penalty(85, 100, 20, penalty=2.0) == pytest.approx(-0.5)  # -5 / 20 * 2
    assert overlong_penalty(5000, 100, 20, penalty=2.0) == -2.0
    # no buffer: a hard cliff just past max_tokens
    assert overlong_penalty(100, 100, 0) == 0.0 and overlong_penalty(101, 100, 0) == -1.0


def test_overlong_penalty_bad_input():
    with pytest.raises(ValueError, match="buffer_tokens"):
        overlong_penalty(10, 100, 101)
    with pytest.raises(ValueError, match="max_tokens"):
        overlong_penalty(10, 0, 0)
    with pytest.raises(ValueError, match="penalty"):
        overlong_penalty(10, 100, 20, penalty=-1.0)


def test_format_reward():
    assert format_reward(r"so the answer is \boxed{42}", r"\\boxed\{.+\}", 0.5) == 0.5
    assert format_reward("so the answer is 42", r"\\boxed\{.+\}", 0.5) == 0.0
    # plain re.search: ^ anchors at the start of the text unless the pattern asks for (?m)
    assert format_reward("think\nAnswer: 3", r"^Answer:", 1.0) == 0.0
    assert format_reward("think\nAnswer: 3", r"(?m)^Answer:", 1.0) == 1.0
    with pytest.raises(ValueError, match=r"invalid regular expression '\(unclosed'"):
        format_reward("x", "(unclosed", 1.0)


def test_length_penalty_hand_computed():
    # target 100, weight 0.2: -0.2 * max(0, n - 100) / 100
    assert length_penalty(50, 100, 0.2) == 0.0
    assert length_penalty(100, 100, 0.2) == 0.0
    assert length_penalty(150, 100, 0.2) == pytest.approx(-0.1)  # -0.2 * 50 / 100
    assert length_penalty(300, 100, 0.2) == pytest.approx(-0.4)  # -0.2 * 200 / 100
    with pytest.raises(ValueError, match="target_tokens"):
        length_penalty(10, 0, 0.2)
