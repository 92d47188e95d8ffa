"""scheduler/breaker.py: a domain trips after `failures` failed episodes in a row (not when successes break
the run), stays out of the draws for `cooldown_steps` steps, then is half-open (one failure re-opens it at
once, one success closes it); the lines it reports name the domain and its last error; state round trips."""

from __future__ import annotations

import json

from posttrain.rl.breaker import Breakers


def fail(br: Breakers, domain: str, n: int, why: str = "infra_error: sandbox unreachable") -> None:
    for _ in range(n):
        br.record(domain, ok=False, why=why)


def test_trips_after_consecutive_failures_only():
    br = Breakers(failures=3, cooldown_steps=2)
    br.begin_step(0)
    # failures interleaved with successes never trip it
    for _ in range(5):
        fail(br, "sql", 2)
        br.record("sql", ok=True)
    assert not br.is_open("sql") and br.end_step() == []
    fail(br, "sql", 2)
    assert not br.is_open("sql")
    fail(br, "sql", 1)
    assert br.is_open("sql") and br.trips == {"sql": 1}
    # other domains are unaffected
    assert br.allowed("math", 1) and not br.is_open("math")


def test_open_for_cooldown_steps_then_half_open_success_closes():
    br = Breakers(failures=2, cooldown_steps=3)
    br.begin_step(4)
    fail(br, "sql", 2)
    assert not br.allowed("sql", 4)
    assert [br.allowed("sql", s) for s in (5, 6, 7)] == [False, False, False]  # the cooldown's 3 steps
    br.begin_step(8)
    assert br.allowed("sql", 8)  # half-open: it gets groups again
    assert not br.is_open("sql") and "sql" in br.half_open
    br.end_step()
    br.record("sql", ok=True)
    assert "sql" not in br.half_open and br.allowed("sql", 8)
    events = br.end_step()
    assert len(events) == 1 and "'sql'" in events[0] and "resumed" in events[0]
    # closed again: a single failure no longer re-opens it; it takes `failures` in a row
    fail(br, "sql", 1)
    assert not br.is_open("sql")
    fail(br, "sql", 1)
    assert br.is_open("sql") and br.trips["sql"] == 2


def test_half_open_failure_reopens_at_once():
    br = Breakers(failures=5, cooldown_steps=1)
    br.begin_step(0)
    fail(br, "cad", 5)
    assert br.end_step()  # the trip
    assert not br.allowed("cad", 1)
    br.begin_step(2)
    assert br.allowed("cad", 2)  # half-open
    fail(br, "cad", 1, why="env_error: render crashed")
    assert br.is_open("cad") and br.trips["cad"] == 2
    assert not br.allowed("cad", 3)  # a fresh cooldown from step 2
    assert br.allowed("cad", 4)
    events = br.end_step()
    assert len(events) == 1 and "'cad'" in events[0] and "render crashed" in events[0]


def test_event_lines_name_domain_and_last_error():
    br = Breakers(failures=3, cooldown_steps=5)
    br.begin_step(0)
    fail(br, "terminal", 2, why="infra_error: first")
    fail(br, "terminal", 1, why="infra_error: docker daemon gone")
    fail(br, "terminal", 4, why="infra_error: while open")  # while open: no second trip, no new line
    events = br.end_step()
    assert len(events) == 1
    assert "'terminal'" in events[0] and "5 steps" in events[0] and "3 episodes" in events[0]
    assert "docker daemon gone" in events[0] and "first" not in events[0]
    assert br.end_step() == []  # the lines are handed out once
    assert br.trips == {"terminal": 1} and br.last_error["terminal"] == "infra_error: while open"
    # no reason given: the line still says so
    br2 = Breakers(failures=1, cooldown_steps=1)
    br2.record("x", ok=False)
    assert "unknown" in br2.end_step()[0]


def test_state_round_trip_through_json():
    br = Breakers(failures=2, cooldown_steps=3)
    br.begin_step(10)
    fail(br, "a", 2, why="infra_error: a down")   # open until step 14
    fail(br, "b", 1, why="env_error: flaky")      # streak 1
    br.begin_step(1)
    fail(br, "c", 2)
    br.allowed("c", 5)                             # c half-open
    back = Breakers(failures=2, cooldown_steps=3)
    back.load_state_dict(json.loads(json.dumps(br.state_dict())))
    assert back.state_dict() == br.state_dict()
    for b in (br, back):
        b.begin_step(11)
    assert [back.allowed("a", s) for s in (11, 13, 14)] == [False, False, True]
    assert [br.allowed("a", s) for s in (11, 13, 14)] == [False, False, True]
    # b's streak carried over: one more failure trips it in both
    for b in (br, back):
        b.record("b", ok=False, why="env_error: flaky")
        b.record("c", ok=False, why="again")  # c was half-open: re-opens at once
    assert back.is_open("b") and back.is_open("c")
    assert back.state_dict() == br.state_dict()
