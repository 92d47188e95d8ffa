"""The cad environment: a part built in OpenSCAD step by step, each step confirmed (docs/cad.md).

spec.py (a part as steps of primitives, its script and gold solid), levels.py (the five part
families), render.py (OpenSCAD in bubblewrap), inspect.py (mesh measurements), checks.py (a step's
checks), env.py (CadEnv), source.py (the generated `cad` task source).
"""

from posttrain.envs.env import register_env

register_env("cad", "posttrain.domains.cad.env:CadEnv")

from posttrain.domains.cad import source  # noqa: E402,F401  (registers the `cad` source)
