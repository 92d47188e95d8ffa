"""The cad environment: a part built in OpenSCAD step by step, each step confirmed (docs/cad.md).

spec.py (a part as steps of primitives, its script and gold solid), levels.py (the five part
families), render.py (OpenSCAD in bubblewrap), inspect.py (mesh measurements), checks.py (a step's
checks), env.py (CadEnv). The task source is posttrain/domains/cad/source.py.
"""

from posttrain.envs.env import Resources, register_env
from posttrain.domains.cad.env import CadEnv


@register_env("cad")
def make_cad_env(resources: Resources) -> CadEnv:
    return CadEnv(resources)
