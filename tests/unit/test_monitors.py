"""Reward-hacking monitors (gap, surge, tampering), alerts.jsonl, and the report's Alerts section; hand-computed."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from posttrain.core.errors import PosttrainError
from posttrain.telemetry.metrics import MetricsLogger
from posttrain.telemetry.report import write_report
from posttrain.verifiers.monitors import Alert, RewardHackingMonitor, note_resume, read_alerts, write_alerts


def _run_gap(heldout_later: float, mon: RewardHackingMonitor | None = None) -> list[Alert]:
    """eval@0 = 0.3; steps 1-5 train 0.3, eval@5 = 0.3 (gap 0 = baseline); steps 6-10 train 0.8, eval@10."""
    mon = mon or RewardHackingMonitor()
    alerts = mon.observe_eval(0, 0.3)
    for s in range(1, 11):
        alerts += mon.observe_step(s, 0.3 if s <= 5 else 0.8, Counter())
        if s == 5:
            alerts += mon.observe_eval(s, 0.3)
    return alerts + mon.observe_eval(10, heldout_later)


def test_gap_fires_when_train_climbs_and_heldout_stalls():
    mon = RewardHackingMonitor()
    alerts = _run_gap(0.3, mon)
    assert [(a.step, a.kind) for a in alerts] == [(10, "reward_gap")]
    d = alerts[0].details
    assert d["train_pass"] == pytest.approx(0.8) and d["heldout_pass"] == pytest.approx(0.3)
    assert d["gap"] == pytest.approx(0.5) and d["gap_baseline"] == pytest.approx(0.0) and d["train_steps"] == 5
    assert "0.800" in alerts[0].message and "0.300" in alerts[0].message
    m = mon.metrics()
    assert m["alert/reward_gap"] == 1.0 and m["alert/violation_surge"] == 0.0
    assert m["monitor/gap"] == pytest.approx(0.5) and m["monitor/gap_baseline"] == pytest.approx(0.0)


def test_gap_quiet_when_heldout_rises_with_train():
    assert _run_gap(0.8) == []  # gap back to 0
    assert _run_gap(0.5) == []  # gap 0.3 widened 0.3 > 0.15, but held-out improved 0.3 -> 0.5 (> eps)
    assert [a.kind for a in _run_gap(0.305)] == ["reward_gap"]  # +0.005 is within eps: a stall


def test_gap_under_threshold_and_first_eval_is_baseline():
    mon = RewardHackingMonitor(gap_widen=0.15)
    for s in range(1, 4):
        mon.observe_step(s, 0.9, Counter())
    assert mon.observe_eval(3, 0.2) == []  # first eval with train steps: baseline 0.7, never an alert
    for s in range(4, 7):
        mon.observe_step(s, 0.9, Counter())
    assert mon.observe_eval(6, 0.1) == []  # gap 0.8, widened 0.1 <= 0.15
    for s in range(7, 10):
        mon.observe_step(s, 1.0, Counter())
    assert [a.kind for a in mon.observe_eval(9, 0.1)] == ["reward_gap"]  # gap 0.9, widened 0.2 > 0.15
    for s in range(10, 13):
        mon.observe_step(s, 0.84, Counter())
    assert mon.observe_eval(12, 0.0) == []  # gap 0.84, widened 0.14


def test_surge_fires_at_the_right_step():
    mon = RewardHackingMonitor(surge_factor=3.0, surge_min=5)
    fired = []
    totals = [2, 2, 2, 6, 7, 30]
    for s, n in enumerate(totals, start=1):
        fired += [(a.step, a.kind) for a in mon.observe_step(s, 0.5, Counter(timeout=n - 1, early_exit=1))]
    # steps 1-3: under 3 steps of history; step 4: 6 is not > max(5, 3*2=6); step 5: 7 <= 3*mean(2,2,2,6)=9;
    # step 6: 30 > 3*mean(2,2,2,6,7)=11.4
    assert fired == [(6, "violation_surge")]
    m = mon.metrics()
    assert m["monitor/violations/total"] == 30.0 and m["monitor/violations/timeout"] == 29.0
    assert m["monitor/violations/early_exit"] == 1.0 and m["alert/violation_surge"] == 1.0


def test_surge_needs_three_steps_of_history_and_surge_min():
    mon = RewardHackingMonitor()
    assert mon.observe_step(1, 0.5, Counter()) == []
    assert mon.observe_step(2, 0.5, Counter()) == []
    assert mon.observe_step(3, 0.5, Counter(timeout=100)) == []  # only 2 previous steps
    mon = RewardHackingMonitor(surge_min=5)
    for s in range(1, 4):
        mon.observe_step(s, 0.5, Counter())
    assert mon.observe_step(4, 0.5, Counter(timeout=5)) == []  # 5 is not > max(5, 0)
    alerts = mon.observe_step(5, 0.5, Counter(timeout=5, signal_SIGSEGV=1, memory_limit=1))
    assert [a.kind for a in alerts] == ["violation_surge"]  # 7 > max(5, 3 * 5/4 = 3.75)
    a = alerts[0]
    assert a.details["total"] == 7 and a.details["baseline"] == pytest.approx(1.25)
    assert "7 violations" in a.message and "1.25" in a.message and "timeout=5" in a.message
    # window: the mean is over the previous up-to-20 steps only
    mon = RewardHackingMonitor(surge_min=0)
    mon.observe_step(0, 0.5, Counter(timeout=1000))
    for s in range(1, 21):
        mon.observe_step(s, 0.5, Counter(timeout=1))
    assert [a.kind for a in mon.observe_step(21, 0.5, Counter(timeout=4))] == ["violation_surge"]  # 4 > 3*1


def test_tampering_and_injection_fire_immediately():
    mon = RewardHackingMonitor()
    alerts = mon.observe_step(1, 0.5, Counter(touched_tests=1))
    assert [(a.step, a.kind) for a in alerts] == [(1, "test_tampering")]
    assert alerts[0].details == {"counts": {"touched_tests": 1}} and "touched_tests=1" in alerts[0].message
    alerts = mon.observe_step(2, 0.5, Counter(forged_verdict=2, judge_injection=3, touched_tests=0))
    assert [a.kind for a in alerts] == ["test_tampering", "judge_injection"]
    assert alerts[0].details == {"counts": {"forged_verdict": 2}} and alerts[1].details == {"count": 3}
    assert mon.observe_step(3, 0.5, Counter(timeout=1)) == []
    assert mon.metrics()["alert/test_tampering"] == 0.0
    assert mon.metrics()["monitor/violations/touched_tests"] == 0.0  # seen kinds stay, as 0


def test_bad_input_is_a_one_line_error():
    mon = RewardHackingMonitor()
    with pytest.raises(PosttrainError, match="train_pass_rate at step 1"):
        mon.observe_step(1, 1.5, Counter())
    with pytest.raises(PosttrainError, match="event count 'timeout' at step 2"):
        mon.observe_step(2, 0.5, {"timeout": -1})
    assert mon.observe_step(3, float("nan"), Counter()) == []  # nothing scored: left out of the gap mean
    assert mon.observe_eval(3, None) == []
    with pytest.raises(PosttrainError, match="bad saved state"):
        mon.load_state_dict({"version": 1})


def _script(mon: RewardHackingMonitor, steps: range) -> list[tuple]:
    out = []
    for s in steps:
        ev = Counter(timeout=[1, 0, 2, 1, 9, 0, 1, 12, 0, 1, 0, 2][s % 12], touched_tests=int(s == 9))
        alerts = mon.observe_step(s, min(1.0, 0.2 + 0.05 * s), ev)
        if s % 4 == 0:
            alerts += mon.observe_eval(s, 0.3)
        out.append(([(a.step, a.kind, a.message, json.dumps(a.details)) for a in alerts], mon.metrics()))
    return out


def test_state_dict_round_trip_gives_identical_future_alerts():
    whole = _script(RewardHackingMonitor(), range(0, 17))
    first = RewardHackingMonitor()
    _script(first, range(0, 7))
    state = json.loads(json.dumps(first.state_dict()))  # must be JSON-able
    resumed = RewardHackingMonitor()
    resumed.load_state_dict(state)
    assert resumed.metrics() == first.metrics()
    rest = _script(resumed, range(7, 17))
    assert rest == whole[7:]
    kinds = {k for alerts, _ in whole for (_, k, _, _) in alerts}
    assert kinds >= {"reward_gap", "violation_surge", "test_tampering"}  # the comparison covers each rule


def test_write_read_alerts_appends_and_survives_torn_line(tmp_path):
    assert read_alerts(tmp_path) == []
    write_alerts(tmp_path, [])
    assert not (tmp_path / "alerts.jsonl").exists()
    write_alerts(tmp_path, [Alert(1, "test_tampering", "a", {"counts": {"touched_tests": 1}})])
    before = (tmp_path / "alerts.jsonl").read_bytes()
    write_alerts(tmp_path, [Alert(2, "violation_surge", "b"), Alert(2, "judge_injection", "c")])
    after = (tmp_path / "alerts.jsonl").read_bytes()
    assert after.startswith(before)  # appended, old lines untouched
    got = read_alerts(tmp_path)
    assert [(a["step"], a["kind"], a["message"]) for a in got] == [(1, "test_tampering", "a"), (2, "violation_surge", "b"),
                                                                    (2, "judge_injection", "c")]
    assert got[0]["details"] == {"counts": {"touched_tests": 1}}
    with open(tmp_path / "alerts.jsonl", "ab") as f:
        f.write(b'{"step": 3, "kind": "reward_ga')  # a crash mid-write
    assert len(read_alerts(tmp_path)) == 3
    write_alerts(tmp_path, [Alert(4, "reward_gap", "d")])  # the torn line must not swallow this one
    assert [a["step"] for a in read_alerts(tmp_path)] == [1, 2, 2, 4]
    note_resume(tmp_path, 2)  # resumed from the step-2 checkpoint: step 4's alert was never "really" raised
    write_alerts(tmp_path, [Alert(3, "reward_gap", "e")])
    assert [(a["step"], a["message"]) for a in read_alerts(tmp_path)] == [(1, "a"), (2, "b"), (2, "c"), (3, "e")]


def _metrics_run(run):
    with MetricsLogger(run, tensorboard=False) as log:
        for s in range(1, 6):
            log.log(s, {"loss": 1.0 / s, "monitor/violations/total": float(s)})


def test_report_alerts_section_escaped(tmp_path):
    run = tmp_path / "rl"
    _metrics_run(run)
    write_alerts(run, [Alert(3, "judge_injection", 'completion said <script>alert("x")</script> & more'),
                       Alert(4, "judge_injection", "again"), Alert(5, "reward_gap", "gap 0.5")])
    page = write_report(run).read_text()
    assert "Alerts (3)" in page
    assert "<script>" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; more" in page
    assert page.index("Alerts (3)") < page.index("<img")  # near the top of the stage, before the curves
    assert "<td>judge_injection</td><td>2</td><td>3</td><td>4</td>" in page  # count per kind, first/last step
    assert "<td>5</td><td>reward_gap</td><td>gap 0.5</td>" in page


def test_report_without_alerts_has_no_section(tmp_path):
    run = tmp_path / "rl"
    _metrics_run(run)
    page = write_report(run).read_text()
    assert "Alerts (" not in page and 'class="alerts"' not in page
