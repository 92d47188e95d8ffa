"""Temperature schedules: endpoints, hand-computed interior values, piecewise constant epochs."""

from __future__ import annotations

import pytest

from posttrain.algos.temperature import SCHEDULES, temperature_at


def temp(step, schedule, total=35, start=1.0, end=0.4):
    return temperature_at(step, steps_per_epoch=10, total_steps=total, start=start, end=end, schedule=schedule)


def test_linear_hand_computed():
    # 35 steps / 10 per epoch -> 4 epochs, progress 0, 1/3, 2/3, 1 -> 1.0, 0.8, 0.6, 0.4
    assert [temp(s, "linear") for s in (0, 9, 10, 19, 20, 30, 34)] == pytest.approx([1.0, 1.0, 0.8, 0.8, 0.6, 0.4, 0.4])
    assert temp(99, "linear") == pytest.approx(0.4)  # past total_steps: stays at end
    # rising schedule, 3 epochs: 0.6 -> 0.8 -> 1.0
    assert [temp(s, "linear", total=30, start=0.6, end=1.0) for s in (0, 15, 29)] == pytest.approx([0.6, 0.8, 1.0])


def test_cosine_hand_computed():
    # 4 epochs: progress 1/3 -> 0.4 + 0.6 * (1 + cos(pi/3)) / 2 = 0.4 + 0.6 * 0.75 = 0.85
    #           progress 2/3 -> 0.4 + 0.6 * (1 - 0.5) / 2 = 0.55
    assert [temp(s, "cosine") for s in (0, 10, 20, 34)] == pytest.approx([1.0, 0.85, 0.55, 0.4])
    # 3 epochs: the middle epoch is the midpoint, cos(pi/2) = 0 -> (1.0 + 0.4) / 2 = 0.7
    assert temp(15, "cosine", total=30) == pytest.approx(0.7)


def test_constant_and_single_epoch():
    assert {temp(s, "constant") for s in (0, 10, 34, 99)} == {1.0}
    # one epoch only: progress stays 0, so linear/cosine keep `start`
    assert temp(9, "linear", total=10) == 1.0 and temp(9, "cosine", total=10) == 1.0


def test_bad_input_raises():
    with pytest.raises(ValueError, match="unknown temperature schedule 'exp'"):
        temp(0, "exp")
    with pytest.raises(ValueError, match="steps_per_epoch"):
        temperature_at(0, steps_per_epoch=0, total_steps=10, start=1.0, end=0.5, schedule="linear")
    with pytest.raises(ValueError, match="step"):
        temp(-1, "linear")
    assert SCHEDULES == ("constant", "linear", "cosine")
