"""Red team: harmful and benign agentic prompts (prompts.py, source.py; the `redteam` group), the
`safety` verifier (safety.py), the eval's safety table (source.py `summarize`) and report section (report.py)."""

from posttrain.verifiers.registry import register

register("safety", "posttrain.domains.redteam.safety:safety")

from posttrain.domains.redteam import source  # noqa: E402,F401  (registers redteam_* sources and the group)
