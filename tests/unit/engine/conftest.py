"""Fixtures the engine tests share (engine_checks.py): a "sharp" tiny model (weights x10, so greedy
choices are clear-cut and sampling is far from uniform) and the standard prompts as token ids."""

from tests.unit.engine.engine_checks import prompts, sharp_model  # noqa: F401
