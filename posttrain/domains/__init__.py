"""Domains: one folder per domain, owning its task source, env, verifier and report pieces.

    from posttrain.domains import load_domains
    load_domains()        # imports every posttrain/domains/<name>/ package once: each registers its parts

Each `posttrain/domains/<name>/__init__.py` registers its parts into the lower layers' registries
(tasks/registry.py, envs/env.py, verifiers/registry.py), by "module:attr" name where it can, so a lower
layer never imports a domain. A domain outside this folder (a plugin, a test's) is a package named
in the environment variable POSTTRAIN_DOMAINS (comma-separated module names), imported after these
(docs/adding-a-domain.md). Entry points (cli, recipes, eval, rl, tests/conftest.py) call load_domains().
"""

from __future__ import annotations

import importlib
import os
import pkgutil

from posttrain.core.registry import mark_domains_loaded
from posttrain.verifiers.registry import register

ENV_VAR = "POSTTRAIN_DOMAINS"
_loaded: set[str] = set()

# the verifier that scores an episode by its environment (envs/score.py); registered here because
# envs and verifiers never import each other, and every multi-turn domain uses it
register("env_score", "posttrain.envs.score:env_score")


def domain_modules() -> list[str]:
    """Every package under posttrain/domains/, then the modules POSTTRAIN_DOMAINS names."""
    found = [f"{__name__}.{m.name}" for m in pkgutil.iter_modules(__path__) if m.ispkg]
    extra = [m.strip() for m in os.environ.get(ENV_VAR, "").split(",") if m.strip()]
    return sorted(found) + extra


def load_domains() -> list[str]:
    """Import every domain package once (idempotent; a module named later in POSTTRAIN_DOMAINS is
    imported on the next call). Returns the modules loaded so far."""
    for module in domain_modules():
        if module not in _loaded:
            importlib.import_module(module)
            _loaded.add(module)
    mark_domains_loaded()
    return sorted(_loaded)
