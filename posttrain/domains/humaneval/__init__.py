"""HumanEval (source.py): 164 Python functions checked by their tests (the `code` verifier)."""

from posttrain.domains.humaneval import source  # noqa: F401  (registers the `humaneval` source)
