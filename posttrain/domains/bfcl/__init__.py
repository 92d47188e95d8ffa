"""BFCL v4 (function calling): single-turn categories checked by AST, multi-turn by API state.

data.py (the dataset), source.py (task sources bfcl_*), env.py + session.py + runner.py (the
multi-turn env), ast_check.py (the `bfcl_ast` verifier), cli.py (`posttrain verify bfcl`).
Importing this package registers them by name (nothing heavy is imported).
"""

from posttrain.envs.env import register_env
from posttrain.verifiers.registry import register

register_env("bfcl", "posttrain.domains.bfcl.env:BfclEnv")
register("bfcl_ast", "posttrain.domains.bfcl.ast_check:bfcl_ast")

from posttrain.domains.bfcl import source  # noqa: E402,F401  (registers the bfcl_* sources: sizes come from the data)
