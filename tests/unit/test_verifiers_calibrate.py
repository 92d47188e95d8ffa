"""Calibrated thresholds: the file `verify calibrate` writes, reading and checking it (one-line
errors naming the file, the verifier or the key), and the loop closed end to end: labels ->
calibrate -> thresholds file -> DomainConfig -> mixture tasks -> task_score."""

from __future__ import annotations

import json

import pytest
import yaml

from posttrain.config.base import config_text, load_config, validate
from posttrain.config.rl import RLConfig
from posttrain.core.errors import ConfigError, DataError
from posttrain.tasks.mixture import build_mixture
from posttrain.core.types import Score
from posttrain.verifiers import VERIFIERS, task_score
from posttrain.verifiers.calibrate import (THRESHOLDS_FILE, calibrate, check_thresholds, read_thresholds,
                                           resolve_thresholds, thresholds_document)

# (human label, exact, math). exact is binary: no threshold. math, F1 by threshold (pass = >=):
#   0.2: tp 3 fp 4 -> 6/13   0.3: tp 3 fp 3 -> 1/2   0.55: tp 3 fp 2 -> 3/4   0.6: tp 2 fp 2 fn 1 -> 4/7
#   0.65: tp 2 fp 1 fn 1 -> 2/3   0.8: tp 2 fp 0 fn 1 -> 4/5 (best; P 1, R 2/3)   0.9: tp 1 fn 2 -> 1/2
ROWS = [(True, 1, 0.9), (True, 1, 0.8), (False, 1, 0.65), (False, 0, 0.6), (True, 0, 0.55),
        (False, 0, 0.3), (False, 0, 0.2)]


def labels_file(path, rows=ROWS):
    path.write_text("".join(json.dumps({"sample_id": f"s{i}", "scores": {"exact": e, "math": m},
                                        "score": (e + m) / 2, "label": y}) + "\n"
                            for i, (y, e, m) in enumerate(rows)))
    return path


def test_calibrate_writes_the_f1_best_threshold_of_score_valued_verifiers(tmp_path):
    labels = labels_file(tmp_path / "labels.jsonl")
    rep = calibrate(tmp_path, labels)
    path = tmp_path / THRESHOLDS_FILE
    assert rep["thresholds_file"] == str(path)
    doc = json.loads(path.read_text())
    assert doc["thresholds"] == {"math": 0.8}  # exact is binary: none
    assert doc["measured"]["math"] == pytest.approx({"n": 7, "precision": 1.0, "recall": 2 / 3, "f1": 0.8})
    assert doc["labels"] == str(labels) and doc["labelled"] == 7
    assert doc == thresholds_document(rep)
    assert read_thresholds(path) == {"math": 0.8}
    # --thresholds-out elsewhere; the run directory's default file is then not written
    other = tmp_path / "sub" / "t.json"
    (tmp_path / "sub").mkdir()
    path.unlink()
    assert calibrate(tmp_path, labels, thresholds_out=other)["thresholds_file"] == str(other)
    assert json.loads(other.read_text())["thresholds"] == {"math": 0.8} and not path.exists()


def test_bad_labels_leave_an_existing_thresholds_file_untouched(tmp_path):
    good = labels_file(tmp_path / "labels.jsonl")
    calibrate(tmp_path, good)
    before = (tmp_path / THRESHOLDS_FILE).read_bytes()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"scores": {"math": 0.9}, "label": "maybe"}\n')
    with pytest.raises(DataError, match=r"bad.jsonl:1: label 'maybe'"):
        calibrate(tmp_path, bad)
    assert (tmp_path / THRESHOLDS_FILE).read_bytes() == before


def test_cli_calibrate_writes_the_file_and_says_how_to_apply_it(tmp_path):
    from typer.testing import CliRunner

    from posttrain.cli.verify import app

    labels = labels_file(tmp_path / "labels.jsonl")
    out = tmp_path / "thr.json"
    res = CliRunner().invoke(app, ["calibrate", str(tmp_path), "--labels", str(labels), "--thresholds-out", str(out)])
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["thresholds"] == {"math": 0.8}
    help_text = CliRunner().invoke(app, ["calibrate", "--help"]).output
    assert "--thresholds-out" in help_text and "verifier_thresholds.json" in help_text


def test_the_loop_closes_calibrate_file_config_mixture_task_score(tmp_path):
    calibrate(tmp_path, labels_file(tmp_path / "labels.jsonl"))
    domain = {"name": "chain_sum", "verifiers": ["numeric", "math"], "combine": "all", "eval_tasks": 2}
    cfg = validate(RLConfig, {"tasks": [{**domain, "verifier_thresholds": str(tmp_path / THRESHOLDS_FILE)}]})
    assert cfg.tasks[0].verifier_thresholds == str(tmp_path / THRESHOLDS_FILE)  # config is data: the path
    build_mixture(cfg.tasks, task_seed=500_000, seed=0)
    assert cfg.tasks[0].verifier_thresholds == {"math": 0.8}  # building the mixture read the file into its values
    # the saved config holds the values, and loads back to the same thresholds without the file
    (tmp_path / THRESHOLDS_FILE).unlink()
    saved = tmp_path / "config.yaml"
    saved.write_text(config_text(cfg))
    assert yaml.safe_load(saved.read_text())["tasks"][0]["verifier_thresholds"] == {"math": 0.8}
    cfg = load_config(RLConfig, saved)
    mix = build_mixture(cfg.tasks, task_seed=500_000, seed=0)
    plain = build_mixture(validate(RLConfig, {"tasks": [domain]}).tasks, task_seed=500_000, seed=0)
    borderline = [Score(1.0, "numeric"), Score(0.65, "math")]  # passes at 0.5, fails at 0.8
    confident = [Score(1.0, "numeric"), Score(0.85, "math")]
    tasks = mix.sample(3, step=0) + mix.sources[0].eval_tasks()
    assert len(tasks) == 5
    for task in tasks:
        assert task.metadata["verifier_thresholds"] == {"math": 0.8} and task.verifiers == ("numeric", "math")
        assert task_score(borderline, task) == 0.0
        assert task_score(confident, task) == 1.0
    for task in plain.sample(3, step=0):
        assert "verifier_thresholds" not in task.metadata
        assert task_score(borderline, task) == 1.0


def test_check_thresholds_accepts_numbers_in_range():
    assert check_thresholds({"math": 0, "numeric": 1, "exact": 0.25}) == {"math": 0.0, "numeric": 1.0, "exact": 0.25}
    assert resolve_thresholds(None) is None and resolve_thresholds({}) == {}


@pytest.mark.parametrize("value, message", [
    ({"nope": 0.5}, "threshold for a verifier that is not registered: unknown verifier 'nope'; known: "),
    ({"numerc": 0.5}, "unknown verifier 'numerc' (did you mean numeric?)"),
    ({"math": 1.5}, "threshold 'math' must be a number in [0, 1], got 1.5"),
    ({"math": -0.1}, "threshold 'math' must be a number in [0, 1], got -0.1"),
    ({"math": "high"}, "threshold 'math' must be a number in [0, 1], got 'high'"),
    ({"math": True}, "threshold 'math' must be a number in [0, 1], got True"),
    ({"math": float("nan")}, "threshold 'math' must be a number in [0, 1], got nan"),
    ({"math": None}, "threshold 'math' must be a number in [0, 1], got None"),
])
def test_inline_thresholds_errors_name_the_key(value, message):
    """Thresholds are checked where the mixture is built (the config stays data)."""
    data = {"tasks": [{"name": "chain_sum", "verifier_thresholds": value}]}
    with pytest.raises(ConfigError) as e:
        build(data)
    text = str(e.value)
    assert text.startswith("domain 'chain_sum': verifier_thresholds: ") and message in text
    assert "\n" not in text


def build(data):
    return build_mixture(validate(RLConfig, data, source="rl.yaml").tasks, task_seed=500_000, seed=0)


def test_thresholds_of_the_wrong_type_fail_at_config_load():
    with pytest.raises(ConfigError, match=r"^rl.yaml: tasks.0.verifier_thresholds"):
        validate(RLConfig, {"tasks": [{"name": "chain_sum", "verifier_thresholds": [0.5]}]}, source="rl.yaml")


def test_a_thresholds_file_for_an_unknown_verifier_names_file_and_verifier(tmp_path):
    f = tmp_path / "verifier_thresholds.json"
    f.write_text(json.dumps({"thresholds": {"llm_judge": 0.4, "math": 0.8}, "measured": {}}))
    cfg = tmp_path / "rl.yaml"
    cfg.write_text(yaml.safe_dump({"tasks": [{"name": "chain_sum", "verifier_thresholds": str(f)}]}))
    with pytest.raises(ConfigError) as e:
        build_mixture(load_config(RLConfig, cfg).tasks, task_seed=500_000, seed=0)
    text = str(e.value)
    known = ", ".join(sorted(VERIFIERS))
    assert {"code", "exact", "math", "numeric", "reasoning_gym"} <= set(VERIFIERS)
    assert text == (f"domain 'chain_sum': verifier_thresholds: thresholds file {f}: threshold for a verifier "
                    f"that is not registered: unknown verifier 'llm_judge'; known: {known}")
    # a flat hand-written file is read the same way, and a bad value there names its key
    f.write_text(json.dumps({"math": 2}))
    with pytest.raises(ConfigError, match=rf"thresholds file .*{f.name}: threshold 'math' must be a number in \[0, 1\], got 2$"):
        read_thresholds(f)


@pytest.mark.parametrize("content, message", [
    (None, "cannot read thresholds file {f}: No such file or directory"),
    ("{\"math\": 0.8", "thresholds file {f}: not valid JSON (Expecting ',' delimiter"),
    ("", "thresholds file {f}: not valid JSON (Expecting value"),
    ("[0.8]", "thresholds file {f}: expected a mapping of verifier name -> threshold, got list"),
    ('{"thresholds": [0.8]}', "thresholds file {f}: expected a mapping of verifier name -> threshold, got list"),
])
def test_a_missing_or_corrupt_file_names_the_file(tmp_path, content, message):
    f = tmp_path / "t.json"
    if content is not None:
        f.write_text(content)
    with pytest.raises(ConfigError) as e:
        build({"tasks": [{"name": "chain_sum", "verifier_thresholds": str(f)}]})
    text = str(e.value)
    assert text.startswith("domain 'chain_sum': verifier_thresholds: ") and message.format(f=f) in text
    assert "\n" not in text
