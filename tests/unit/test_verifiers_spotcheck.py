"""Spot checks (stratified sample, escaped HTML, broken lines) and calibration against human labels."""

import json
from collections import Counter

import pytest

from posttrain.core.errors import DataError
from posttrain.verifiers.calibrate import calibrate, format_calibration
from posttrain.verifiers.spotcheck import allocate, spotcheck

HOSTILE = "<script>alert('pwned')</script>"
# (domain, score) -> how many lines; sizes chosen uneven
SIZES = {("a", 1.0): 2, ("a", 0.0): 10, ("b", 0.75): 30, ("b", 0.25): 5, ("b", None): 3,
         ("c", 1.0): 1, ("c", 0.0): 40}
VERDICT = {1.0: "pass", 0.75: "pass", 0.0: "fail", 0.25: "fail", None: "unscored"}
# n=24 over 7 strata: share 3 -> a/pass 2, b/unscored 3, c/pass 1 taken whole; 18 left over 4
# strata: 4 each, the 2 left over go to the largest (c/fail 40, b/pass 30).
EXPECTED = {("a", "pass"): 2, ("b", "unscored"): 3, ("c", "pass"): 1, ("a", "fail"): 4,
            ("b", "fail"): 4, ("b", "pass"): 5, ("c", "fail"): 5}


def _line(step, i, domain, score):
    completion = HOSTILE if (domain, score) == ("a", 1.0) and i == 0 else f"Answer: {i}"
    return {"step": step, "task_id": f"{domain}/{i}", "domain": domain, "prompt": f"q {i} & <b>",
            "completion": completion, "reference": {"answer": "</pre><b>gold"},
            "scores": {"numeric": score, "math": score}, "score": score, "reward": score,
            "finish_reason": "stop", "events": []}


@pytest.fixture
def run_dir(tmp_path):
    lines = [_line(1 + k % 2, i, d, s) for k, ((d, s), n) in enumerate(SIZES.items()) for i in range(n)]
    (tmp_path / "rollouts").mkdir()
    for step in (1, 2):
        with open(tmp_path / "rollouts" / f"step_{step:06d}.jsonl", "w") as f:
            for rec in lines:
                if rec["step"] == step:
                    f.write(json.dumps(rec) + "\n")
            if step == 2:  # broken lines: skipped and counted; a blank line is not counted
                f.write('{"domain": "a", "score": 1.0, \n\n[1, 2]\n{"domain": "a", "score": "high"}\n')
    return tmp_path


def _read(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_allocate_spreads_evenly():
    sizes = {(d, VERDICT[s]): n for (d, s), n in SIZES.items()}
    assert allocate(sizes, 24) == EXPECTED
    assert allocate(sizes, 1000) == sizes
    assert allocate(sizes, 0) == {k: 0 for k in sizes}
    assert allocate({"x": 10, "y": 10, "z": 10}, 10) == {"x": 4, "y": 3, "z": 3}


def test_spotcheck_stratified_reproducible_escaped(run_dir, tmp_path_factory):
    res = spotcheck(run_dir, n=24, seed=0)
    assert res == {"jsonl": run_dir / "spotcheck" / "spotcheck.jsonl",
                   "html": run_dir / "spotcheck" / "spotcheck.html"}
    assert res.skipped == 3 and all("step_000002.jsonl" in w for w in res.skipped_at)
    recs = _read(res["jsonl"])
    got = Counter((r["domain"], VERDICT[r["score"]]) for r in recs)
    assert dict(got) == EXPECTED
    assert {k: v[1] for k, v in res.strata.items()} == EXPECTED
    assert res.strata[("c", "fail")] == (40, 5)
    assert all(r["label"] is None and r["note"] == "" for r in recs)
    assert len({r["sample_id"] for r in recs}) == 24
    assert len({r["source"] for r in recs}) == 24
    assert all(r["scores"] == {"numeric": r["score"], "math": r["score"]} for r in recs)

    # same seed -> same sample; another seed -> another sample (same counts per stratum)
    other = tmp_path_factory.mktemp("again")
    again = _read(spotcheck(run_dir, n=24, seed=0, out_dir=other)["jsonl"])
    assert [r["source"] for r in again] == [r["source"] for r in recs]
    seed1 = _read(spotcheck(run_dir, n=24, seed=1, out_dir=other)["jsonl"])
    assert [r["source"] for r in seed1] != [r["source"] for r in recs]
    assert Counter((r["domain"], VERDICT[r["score"]]) for r in seed1) == got

    page = res["html"].read_text()
    assert any(r["completion"] == HOSTILE for r in recs)  # a/pass has 2 lines: both drawn
    assert "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;" in page
    assert "alert('pwned')" not in page and page.count("<script") == 1  # only the page's own filter
    assert "</pre><b>gold" not in page and "&lt;/pre&gt;&lt;b&gt;gold" in page
    assert page.count('class="card ') == 24 and 'data-verdict="unscored"' in page
    assert "http" not in page  # self-contained: nothing loaded from elsewhere


def test_spotcheck_without_rollouts_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match=str(tmp_path / "rollouts")):
        spotcheck(tmp_path)


# label, exact, judge (score-valued), tie (score-valued, F1 tie between 0.25 and 0.8)
ROWS = [
    (True, 1, 0.9, 0.9), (1, 1, 0.6, 0.8), ("correct", 0, 0.4, 0.3), ("Correct", 0, 0.05, 0.25),
    ("wrong", 1, 0.7, 0.7), (False, 0, 0.2, 0.6), (0, 0, 0.55, 0.5), ("false", 0, 0.1, 0.26),
    (None, 1, 0.9, 0.1), ("", 1, 0.9, 0.1),
]


def _labels_file(path, rows):
    with open(path, "w") as f:
        for i, (label, exact, judge, tie) in enumerate(rows):
            scores = {"exact": exact, "judge": judge, "tie": tie}
            f.write(json.dumps({"sample_id": f"s{i}", "scores": scores, "score": (exact + judge) / 2,
                                "label": label}) + "\n")
        # labelled, but no verifier values: counted as labelled, judged by nobody
        f.write(json.dumps({"sample_id": "s_none", "scores": {"exact": None}, "score": None,
                            "label": False}) + "\n")
    return path


def test_calibrate_hand_computed(tmp_path):
    labels = _labels_file(tmp_path / "labels.jsonl", ROWS)
    rep = calibrate(tmp_path, labels)
    assert (rep["labelled"], rep["unlabelled"], rep["human_correct"]) == (9, 2, 4)
    ex = rep["verifiers"]["exact"]  # preds 1,1,0,0 | 1,0,0,0 -> tp 2 fp 1 fn 2 tn 3
    assert (ex["n"], ex["tp"], ex["fp"], ex["fn"], ex["tn"]) == (8, 2, 1, 2, 3)
    assert ex["precision"] == pytest.approx(2 / 3) and ex["recall"] == 0.5
    assert ex["f1"] == pytest.approx(4 / 7) and ex["accuracy"] == pytest.approx(5 / 8)
    assert ex["score_valued"] is False and ex["suggested"] is None
    ju = rep["verifiers"]["judge"]  # at 0.5: tp 2 (0.9, 0.6) fp 2 (0.7, 0.55) fn 2
    assert (ju["tp"], ju["fp"], ju["fn"], ju["tn"]) == (2, 2, 2, 2)
    # best: threshold 0.4 -> tp 3 (0.9, 0.6, 0.4) fp 2 (0.7, 0.55) fn 1 -> P 0.6 R 0.75 F1 2/3
    assert ju["suggested"] == pytest.approx({"threshold": 0.4, "precision": 0.6, "recall": 0.75,
                                             "f1": 2 / 3})
    # tie: thr 0.25 -> tp 4 fp 4 (F1 8/12); thr 0.8 -> tp 2 fp 0 fn 2 (F1 4/6): the higher wins
    assert rep["verifiers"]["tie"]["suggested"]["threshold"] == 0.8
    assert rep["verifiers"]["tie"]["suggested"]["f1"] == pytest.approx(2 / 3)
    comb = rep["combined"]
    assert comb["n"] == 8 and comb["score_valued"] is True
    saved = json.loads((tmp_path / "calibration.json").read_text())
    assert saved["verifiers"]["judge"]["suggested"]["threshold"] == 0.4
    table = format_calibration(rep)
    assert "judge" in table and "(combined score)" in table and "0.667" in table and "9 labelled" in table


def test_calibrate_undefined_metrics_are_none(tmp_path):
    labels = _labels_file(tmp_path / "l.jsonl", [(False, 0, 0.0, 0.0), (False, 0, 0.0, 0.0)])
    ex = calibrate(tmp_path, labels)["verifiers"]["exact"]
    assert ex["precision"] is None and ex["recall"] is None and ex["f1"] is None and ex["accuracy"] == 1.0


@pytest.mark.parametrize("bad", ['"maybe"', "0.5", "[1]"])
def test_calibrate_bad_label_names_file_and_line(tmp_path, bad):
    p = tmp_path / "labels.jsonl"
    p.write_text('{"scores": {"a": 1}, "score": 1, "label": true}\n'
                 '{"scores": {"a": 1}, "score": 1, "label": ' + bad + '}\n')
    with pytest.raises(DataError, match=f"{p}:2"):
        calibrate(tmp_path, p)
    assert not (tmp_path / "calibration.json").exists()
    p.write_text('{"label": true}\n{not json\n')
    with pytest.raises(DataError, match=f"{p}:2"):
        calibrate(tmp_path, p)
    p.write_text('{"label": null}\n')
    with pytest.raises(DataError, match="no labelled lines"):
        calibrate(tmp_path, p)


def test_spotcheck_then_calibrate_roundtrip(run_dir):
    res = spotcheck(run_dir, n=10, seed=3)
    recs = _read(res["jsonl"])
    for r in recs:  # the human agrees with the verifiers except on failed "b" lines
        r["label"] = "correct" if (r["score"] or 0) >= 0.5 or r["domain"] == "b" else "wrong"
    res["jsonl"].write_text("".join(json.dumps(r) + "\n" for r in recs))
    rep = calibrate(run_dir, "spotcheck/spotcheck.jsonl")  # relative to the run dir
    assert rep["labelled"] == 10
    assert rep["verifiers"]["numeric"]["precision"] == 1.0
    assert (run_dir / "spotcheck" / "calibration.json").exists()
