"""The BFCL multi-turn environment: BFCL's API classes (file system, trading, travel, ...) in the sandbox.

    env = make_env("bfcl", resources)               # a task of source bfcl_multi_turn_base
    messages = await env.reset(task)                # the first user turn
    obs, done, info = await env.step(action)        # each call runs against the task's API instances
    scores = env.score(task, env.state())           # replay model and ground truth, compare states

An episode walks the task's user questions. A turn with calls gets one observation per call (the
call's result, or "Error (kind): ..." for an unknown function, arguments the method does not take,
or an exception inside it; a call the parser could not read is a "malformed" error); a turn with no
call ends the current user question: the next question comes back as a user observation, and after
the last one the episode is done. `state()` is {"calls": [per user question: [{"name", "arguments"}]]},
everything needed to re-run it.

Execution: BFCL's class sources (read as text from the bfcl-eval wheel, domains/bfcl/data.py) run in
the sandbox under bfcl_runner.py, never in our process. An episode's steps go to ONE long-lived
runner (domains/bfcl/session.py, started at the first call, killed by `close()`) that holds the task's
instances as BFCL's executor does: a step costs one JSON line each way. A step whose calls run past
the task's `limits.tool_timeout` or hit the memory or output limit answers each of them with a
tool_timeout error, drops them from the state, and the runner is replaced by a fresh one replaying
the calls kept so far (the classes are deterministic: seeded randomness, no clock in their public
state; the replay must give the same results). A runner that dies or prints garbage is restarted by
replay once; when that fails too, or bwrap cannot run, InfraError (retried, never scored). MathAPI
imports mpmath, which the sandbox's system Python lacks: its pure-Python source is shipped.

Scoring is BFCL's multi-turn check, from the saved state alone: the model's calls and the ground
truth replay in fresh sandbox runs (`run_calls`, one sandbox request). The episode must reach every
user question; after each question whose ground truth has calls, the model must have called
something in it, every public attribute of every instance must equal the ground truth's (replayed
in its own fresh instances, compared by `!=` inside the runner, as BFCL's state checker does), and
the ground truth's results of that question must all be among the model's results so far (BFCL's
response check, order-free). The verdict is decided here from the runner's report; the model
supplies data (names, JSON arguments), never code.
"""

from __future__ import annotations

import ast
import json
import time
from collections import Counter
from typing import Any, Mapping

from posttrain.envs.env import (
    Action, InfraError, Observation, Resources, StepResult, error_observation,
)
from posttrain.domains.bfcl.session import MEMORY_MB, RUNNER_PATH, BfclSession, StepLimitError, runner_job
from posttrain.domains.terminal.session import cpu_seconds_for, shared_isolation
from posttrain.sandbox import RunRequest, SandboxError, Status
from posttrain.sandbox.isolation import BwrapIsolation
from posttrain.domains.bfcl.data import class_sources, mpmath_files
from posttrain.core.types import Message, Score, Task

RUNNER = RUNNER_PATH.read_text(encoding="utf-8")
RUN_TIMEOUT_S = 30.0
LIMITS = (Status.TIME_LIMIT, Status.MEMORY_LIMIT, Status.OUTPUT_LIMIT)


class ToolLimitError(InfraError):
    """A scoring run hit the sandbox's time, memory or output limit (an InfraError: retried, never scored)."""


def parse_call_string(text: str) -> dict:
    """A ground-truth call string, "mv(source='a.txt', destination='b')", as a call dict (literals only)."""
    node = ast.parse(text.strip(), mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"bfcl: ground truth {text!r} is not a plain function call")
    args = [ast.literal_eval(a) for a in node.args]
    kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
    call = {"name": node.func.id, "arguments": _plain(kwargs)}
    if args:
        call["args"] = _plain(args)
    return call


def _plain(value: Any) -> Any:
    """Tuples as lists, as they travel through JSON."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def run_calls(sandbox, reference: Mapping[str, Any], runs: Mapping[str, list], compare: tuple[str, str] | None = None,
              timeout_s: float = RUN_TIMEOUT_S, snapshot: bool = False) -> dict:
    """One sandbox run of bfcl_runner.py over `runs` ({name: [per turn: [call]]}); its parsed report
    (with `snapshot`, also each run's final {class: {attr: repr}} under "states")."""
    classes = list(reference["involved_classes"])
    job = {**runner_job(reference), "runs": dict(runs), "compare": list(compare) if compare else None,
           "snapshot": snapshot}
    files = {name: text.encode() for name, text in class_sources(classes).items()}
    if "MathAPI" in classes:
        files.update({name: text.encode() for name, text in mpmath_files().items()})
    files["job.json"] = json.dumps(job).encode()
    request = RunRequest(code=RUNNER, files=files, run_timeout=timeout_s, memory_limit_mb=MEMORY_MB,
                         output_limit_bytes=16 << 20)
    try:
        result = sandbox.run(request)
    except SandboxError as e:
        raise InfraError(f"bfcl: sandbox failed: {e}") from e
    run = result.run
    if run is not None and run.status in LIMITS:
        raise ToolLimitError(f"bfcl: the calls hit the sandbox's limit ({run.status.value})")
    lines = [ln for ln in (run.stdout if run else "").splitlines() if ln.startswith("{")]
    if run is None or not result.ok or not lines:
        why = (run.stderr.strip().splitlines() or ["no output"])[-1] if run else "did not run"
        status = f"{run.status.value}, exit {run.return_code}" if run else "no run"
        raise InfraError(f"bfcl: the API runner gave no report ({status}): {why[:300]}")
    try:
        return json.loads(lines[-1])
    except json.JSONDecodeError as e:
        raise InfraError(f"bfcl: the API runner's report is not JSON ({e.msg})") from None


def _observation(call: dict, outcome: Mapping[str, Any]) -> Observation:
    if outcome.get("ok"):
        return Observation(content=str(outcome.get("result", "")), role="tool", name=call["name"])
    message = str(outcome.get("result", "")).removeprefix("Error during execution: ")
    return error_observation(str(outcome.get("kind") or "tool_failed"), message, name=call["name"])


class BfclEnv:
    def __init__(self, resources: Resources, *, isolation: BwrapIsolation | None = None) -> None:
        self.resources = resources
        self.tools: list[Mapping[str, Any]] = []
        self._isolation = isolation
        self._task: Task | None = None
        self._calls: list[list[dict]] = [[]]
        self._session: BfclSession | None = None

    async def reset(self, task: Task) -> list[Message]:
        ref = task.reference
        if not isinstance(ref, Mapping) or not {"involved_classes", "initial_config", "questions"} <= set(ref):
            raise ValueError(f"task {task.id!r}: not a BFCL multi-turn task (its reference lacks "
                             "involved_classes / initial_config / questions)")
        await self.close()
        if self._isolation is None:
            self._isolation = shared_isolation()
        self._task, self._calls = task, [[]]
        self._session = BfclSession(ref, isolation=self._isolation, cpu_seconds=cpu_seconds_for(task.limits.seconds))
        self.tools = list(task.metadata.get("tools") or ())
        return list(task.prompt)

    async def step(self, action: Action) -> StepResult:
        assert self._task is not None and self._session is not None, "step() before reset()"
        observations = [error_observation("malformed", e.message) for e in action.errors]
        if action.tool_calls:
            new = [{"name": c.name, "arguments": _plain(dict(c.arguments))} for c in action.tool_calls]
            started = time.perf_counter()
            try:
                outcomes = await self._session.call(new, self._task.limits.tool_timeout)
            except StepLimitError as e:  # the new calls are dropped: the state stays what it was before them
                observations += [error_observation("tool_timeout", str(e), c["name"]) for c in new]
                return StepResult(observations, False, {"env_seconds": time.perf_counter() - started})
            self._calls[-1] += new
            observations += [_observation(c, o) for c, o in zip(new, outcomes)]
            return StepResult(observations, False, {"env_seconds": time.perf_counter() - started,
                                                    "tool_calls": len(new)})
        if action.errors:  # only unreadable calls: the model sees why and the question goes on
            return StepResult(observations, False, {})
        questions = self._task.reference["questions"]
        if len(self._calls) >= len(questions):
            return StepResult([], True, {})
        self._calls.append([])
        return StepResult([Observation(content=m["content"], role="user") for m in questions[len(self._calls) - 1]],
                          False, {"user_turn": len(self._calls) - 1})

    def state(self) -> dict:
        return {"calls": [list(turn) for turn in self._calls]}

    def score(self, task: Task, state: Any) -> list[Score]:
        return [score_state(self.resources.sandbox(), task.reference, state)]

    async def close(self) -> None:
        """Kills the episode's runner (its whole sandbox) and removes its work dir."""
        if self._session is not None:
            await self._session.close()
            self._session = None


def _fail(error: str, **details: Any) -> Score:
    return Score(0.0, "env_score", {"error": error, **details})


def score_state(sandbox, reference: Mapping[str, Any], state: Any) -> Score:
    """BFCL's multi-turn verdict on a saved state (see the module docstring)."""
    if not isinstance(state, Mapping) or not isinstance(state.get("calls"), list):
        return _fail("no calls in the final state")
    calls, truth = state["calls"], reference["ground_truth"]
    if len(calls) != len(truth):
        return _fail(f"the episode reached {len(calls)} of {len(truth)} user turns", error_type="multi_turn:force_terminated")
    truth_calls = [[parse_call_string(s) for s in turn] for turn in truth]
    report = run_calls(sandbox, reference, {"model": calls, "truth": truth_calls}, compare=("model", "truth"))
    seen: list[str] = []
    for turn, (model_turn, truth_turn) in enumerate(zip(calls, truth)):
        seen += [o["result"] for o in report["runs"]["model"][turn]]
        if not truth_turn:
            continue
        if not model_turn:
            return _fail(f"turn {turn}: no call", error_type="multi_turn:empty_turn_model_response")
        differences = report["differences"][turn]
        if differences:
            cls, attrs = next(iter(differences.items()))
            return _fail(f"turn {turn}: {cls} state differs from the ground truth in {', '.join(sorted(attrs))}",
                         error_type="multi_turn:instance_state_mismatch", differences=differences)
        missing = Counter(o["result"] for o in report["runs"]["truth"][turn]) - Counter(seen)
        if missing:
            return _fail(f"turn {turn}: {sum(missing.values())} ground-truth result(s) never returned to the model, "
                         f"e.g. {next(iter(missing))[:120]!r}", error_type="multi_turn:execution_response_mismatch")
    return Score(1.0, "env_score", {"error": ""})

