"""Reward shaping terms, added by the caller to the raw task score (which is kept apart).

- overlong_penalty: DAPO's soft overlong punishment (Yu et al. 2025, "DAPO: An Open-Source LLM
  Reinforcement Learning System at Scale"), with L = max_tokens, B = buffer_tokens, n = tokens:
      0                          if n <= L - B
      ((L - B) - n) / B * penalty  if L - B < n <= L   (linear from 0 down to -penalty)
      -penalty                   if n > L
- format_reward: `weight` if re.search(pattern, text) else 0 (plain re.search: use inline flags
  such as (?m) or (?s) in the pattern for multi-line matching).
- length_penalty: -weight * max(0, n - target) / target (a soft push towards shorter answers).
"""

from __future__ import annotations

import re


def overlong_penalty(num_tokens: int, max_tokens: int, buffer_tokens: int, penalty: float = 1.0) -> float:
    if max_tokens <= 0:
        raise ValueError(f"overlong_penalty: max_tokens must be > 0, got {max_tokens}")
    if not 0 <= buffer_tokens <= max_tokens:
        raise ValueError(f"overlong_penalty: buffer_tokens must be in [0, max_tokens={max_tokens}], got {buffer_tokens}")
    if num_tokens < 0 or penalty < 0:
        raise ValueError(f"overlong_penalty: num_tokens and penalty must be >= 0, got {num_tokens} and {penalty}")
    expected = max_tokens - buffer_tokens
    if num_tokens <= expected:
        return 0.0
    if num_tokens > max_tokens:
        return -float(penalty)
    return (expected - num_tokens) / buffer_tokens * penalty


def format_reward(text: str, pattern: str, weight: float) -> float:
    try:
        found = re.search(pattern, text)
    except re.error as e:
        raise ValueError(f"format_reward: invalid regular expression {pattern!r}: {e}") from None
    return float(weight) if found else 0.0


def length_penalty(num_tokens: int, target_tokens: int, weight: float) -> float:
    if target_tokens <= 0:
        raise ValueError(f"length_penalty: target_tokens must be > 0, got {target_tokens}")
    return -weight * max(0, num_tokens - target_tokens) / target_tokens
