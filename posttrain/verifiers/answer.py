"""The answer line every posttrain prompt asks for, and how a completion's answer is read.

    extract_answer("...\nAnswer: 42")   # -> "42"; no tag: the last non-empty line; nothing: ""
"""

from __future__ import annotations

ANSWER_TAG = "Answer:"
INSTRUCTION = "End your response with a final line of the form `Answer: <answer>`."  # what prompts ask for


def extract_answer(completion: str) -> str:
    """Text after the last `Answer:` (stripped), else the last non-empty line, else ''."""
    head, tag, tail = completion.rpartition(ANSWER_TAG)
    if tag:
        return tail.strip()
    lines = [line.strip() for line in completion.splitlines() if line.strip()]
    return lines[-1] if lines else ""
