"""BFCL's own checkers on a file of cases: the reference verdicts our bfcl_ast checker and bfcl env must equal.

    .venv/bin/python scripts/bfcl_reference_verdicts.py CASES.json > VERDICTS.json
    .venv/bin/python scripts/bfcl_reference_verdicts.py --multi-turn CASES.json > VERDICTS.json

CASES.json: a JSON list of {"category", "functions" (BFCL docs), "calls" ([[name, arguments], ...]),
"answer" (possible answers), "dots" (bool)}. Output: a JSON list, one {"valid", "error_type"} per
case, in order ({"valid": null, "error_type": "exception:<Type>"} where the reference raises).

Run it as a separate process (tests/unit/domains/bfcl/test_bfcl_ast.py does): it imports `bfcl_eval`, which our
own code never does. It needs only the installed `bfcl-eval` wheel (installed --no-deps): its
ast_checker module imports enums and type maps (stdlib only) and `constants.model_config`, whose
table of every model handler pulls in openai, anthropic and the like. That one module is replaced
in sys.modules, before the import, by a table answering the only thing ast_checker asks of it:
`underscore_to_dot` (whether "." in function names became "_"), True for the model name
"posttrain_underscore" and False for "posttrain_dots" (BFCL looks names up with "_" -> "/").
The checker's code itself runs unmodified. Irrelevance and relevance are not AST checks (BFCL's
runner only asks whether a call was decoded) and are not cases here.

--multi-turn: each case is {"id", "involved_classes", "initial_config", "ground_truth" (call strings per
user turn), "calls" (the model's call strings per user turn)}; BFCL's `multi_turn_checker` runs it
(the API classes execute here, in this process, trusted calls only), each case under its own model
name so BFCL's per-model instance cache never carries state from one case into the next.
"""

from __future__ import annotations

import json
import sys
import types
from dataclasses import dataclass


@dataclass(frozen=True)
class _Config:
    underscore_to_dot: bool


def _stub_model_config() -> None:
    module = types.ModuleType("bfcl_eval.constants.model_config")
    module.MODEL_CONFIG_MAPPING = {"posttrain/underscore": _Config(True), "posttrain/dots": _Config(False)}
    sys.modules["bfcl_eval.constants.model_config"] = module


def multi_turn(path: str) -> None:
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    with open(path, encoding="utf-8") as f:
        cases = json.load(f)
    out = []
    for i, case in enumerate(cases):
        decoded = [[turn] if turn else [] for turn in case["calls"]]  # one step per user turn
        entry = {"id": case["id"], "initial_config": case["initial_config"], "involved_classes": case["involved_classes"]}
        try:
            result = multi_turn_checker(decoded, case["ground_truth"], entry, "multi_turn_base", f"case{i}")
            out.append({"valid": bool(result["valid"]), "error_type": "" if result["valid"] else result["error_type"]})
        except Exception as e:
            out.append({"valid": None, "error_type": f"exception:{type(e).__name__}"})
    json.dump(out, sys.stdout)


def main(path: str) -> None:
    _stub_model_config()
    from bfcl_eval.constants.enums import Language
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker

    with open(path, encoding="utf-8") as f:
        cases = json.load(f)
    out = []
    for case in cases:
        model_output = [{name: args} for name, args in case["calls"]]
        try:
            result = ast_checker(case["functions"], model_output, case["answer"], Language.PYTHON,
                                 case["category"], "posttrain_dots" if case["dots"] else "posttrain_underscore")
            out.append({"valid": bool(result["valid"]), "error_type": "" if result["valid"] else result["error_type"]})
        except Exception as e:  # the reference's own crash is a verdict to match too
            out.append({"valid": None, "error_type": f"exception:{type(e).__name__}"})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--multi-turn":
        multi_turn(sys.argv[2])
    elif len(sys.argv) == 2:
        main(sys.argv[1])
    else:
        sys.exit("usage: bfcl_reference_verdicts.py [--multi-turn] CASES.json")
