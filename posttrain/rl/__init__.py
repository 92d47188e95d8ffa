"""An entry point: every domain registers its task sources, envs and verifiers."""

from posttrain.domains import load_domains

load_domains()
