"""CadEnv: build a part in OpenSCAD step by step, each step confirmed against its checks.

    env = make_env("cad", resources)
    messages = await env.reset(task)          # task.reference = {"seed", "level", "fn", "params"}
    obs, done, info = await env.step(action)  # write_script / edit_script / render / confirm_step
    state = env.state()                       # {"script": the last rendered script, "confirmed": k, ...}
    scores = env.score(task, state)           # re-renders state["script"] in a fresh sandbox

reset rebuilds the part (levels.build) from the reference; the user message (the task's prompt)
names the goal and step 1. Tools: `write_script(code)` replaces part.scad, `edit_script(old, new)`
replaces the one occurrence of `old`, `render()` runs OpenSCAD in the sandbox (render.py) and
reports the mesh (bounding box, volume, watertight, bodies, through-holes) or OpenSCAD's error,
`confirm_step(step)` checks the last render against the part's state after that step
(checks.py) and, when every check passes, answers with the next step's instruction. Steps are
confirmed in order, and only against a render of the current script. A turn without a tool call
(and without parse errors) ends the episode; the final part is the last successful render.

score never trusts the episode's numbers: it renders the final script again in a fresh sandbox
work dir and measures it; the reward is the share of the final step's checks that EARN (1.0 only
when all pass; checks.earned: size and position earn only when the volume, or the body and hole
counts, match too; watertight only with something beyond the envelope), details {"checks": {name: bool}, "measured": {...}, "confirmed", "steps", "error"?}.

A sub-unit (reference["step"] = k, domains/cad/source.py option unit: step) starts with part.scad holding
the gold script of steps 1..k-1 (not yet rendered) and those steps confirmed; confirm_step(k)
ends its work (it runs every check of the part after step k). score runs the same checks but
rewards step k's work only (checks.unit_value): the share of step k's own checks that pass (its
probes and the global checks it changes; every check for k = 1), 0 when any other check fails
(given work broken); details + {"unit": "step", "step": k, "counted": [names], "broken": [names]}.
"""

from __future__ import annotations

import time
from typing import Any, Mapping

from posttrain.envs.env import Action, Observation, Resources, StepResult, error_observation
from posttrain.domains.cad.checks import Check, expect, failures, run_checks, share, unit_value
from posttrain.domains.cad.inspect import Measurement, measure_stl
from posttrain.domains.cad.levels import FAMILIES, build
from posttrain.domains.cad.render import RenderOutcome, refusal, render
from posttrain.domains.cad.spec import Part, num, script
from posttrain.sandbox.isolation import BwrapIsolation
from posttrain.core.types import Message, Score, Task

MAX_SCRIPT_CHARS = 20_000


def _tool(name: str, description: str, props: dict, required: list[str]) -> dict:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": props, "required": required, "additionalProperties": False}}}


TOOLS = [
    _tool("write_script", "Replace part.scad with this OpenSCAD source (the whole part so far).",
          {"code": {"type": "string", "description": "the complete OpenSCAD script"}}, ["code"]),
    _tool("edit_script", "Replace the one occurrence of `old` in part.scad with `new`.",
          {"old": {"type": "string", "description": "text that occurs exactly once in part.scad"},
           "new": {"type": "string", "description": "its replacement"}}, ["old", "new"]),
    _tool("render", "Render part.scad with OpenSCAD and report the mesh: bounding box, volume, whether it is "
          "watertight, the number of separate bodies and of through-holes; or OpenSCAD's errors.", {}, []),
    _tool("confirm_step", "Check the last render against step `step` (the next unconfirmed one). When every check "
          "passes the step is confirmed and the next step's instruction is returned; otherwise the failing checks.",
          {"step": {"type": "integer", "description": "the step's number, 1 for the first"}}, ["step"]),
]
TOOL_ARGS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
SYSTEM_PROMPT = (
    "You are a CAD engineer working in OpenSCAD in a sandbox. The part is built step by step: write (or edit) "
    "part.scad so it holds the whole part so far, render it, read the measurements, and confirm the step with "
    "confirm_step; the next step's instruction comes with a passing confirmation. Fix and re-render when a "
    "check fails. When every step is confirmed, reply without a tool call."
)


def part_of(task: Task) -> Part:
    ref = task.reference
    if not isinstance(ref, Mapping) or ref.get("level") not in FAMILIES or not isinstance(ref.get("params"), Mapping) \
            or not isinstance(ref.get("fn"), int):
        raise ValueError(f"cad task {task.id}: reference must hold level (1..5), fn and params, got {ref!r}")
    return build(ref["level"], dict(ref["params"]), ref["fn"])


def target_step(task: Task, part: Part) -> int | None:
    """A sub-unit's step k (reference["step"]), None for a whole part."""
    if not isinstance(task.reference, Mapping) or "step" not in task.reference:
        return None
    k = task.reference["step"]
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= len(part.steps):
        raise ValueError(f"cad task {task.id}: reference step must be an integer in 1..{len(part.steps)}, got {k!r}")
    return k


def render_timeout(task: Task) -> float:
    """OpenSCAD's wall clock: most of the call's timeout (the rest is for reading the mesh)."""
    return max(1.0, 0.8 * task.limits.tool_timeout)


def report(out: RenderOutcome, m: Measurement) -> str:
    s = m.summary()
    lines = [f"Rendered part.stl in {out.seconds:.2f}s: {m.triangles} triangles.",
             f"bounding box: min {s['bbox_min']}, max {s['bbox_max']}, size {s['size']}",
             f"volume: {m.volume:.1f} mm^3", f"watertight: {'yes' if m.watertight else 'no'}"]
    if m.watertight:
        lines += [f"bodies: {m.bodies}", f"through-holes: {m.holes}"]
    else:
        lines.append("bodies, through-holes: not measured (the mesh is not a closed 2-manifold)")
    lines += out.warnings
    return "\n".join(lines)


def step_text(part: Part, k: int) -> str:
    return f"Step {k} of {len(part.steps)}: {part.steps[k - 1].text}"


class CadEnv:
    tools = TOOLS

    def __init__(self, resources: Resources | None = None, *, isolation: BwrapIsolation | None = None) -> None:
        self._resources = resources or Resources()
        self._isolation = isolation
        self._task: Task | None = None
        self._part: Part | None = None
        self._script = ""  # part.scad as it is now
        self._rendered: str | None = None  # the script of the last successful render
        self._measured: Measurement | None = None
        self._confirmed = 0
        self._renders = 0
        self._last = 0  # the last step this episode covers (k of a sub-unit, else the part's last)
        self._unit: int | None = None  # a sub-unit's step

    async def reset(self, task: Task) -> list[Message]:
        self._task, self._part = task, part_of(task)
        self._script, self._rendered, self._measured, self._confirmed, self._renders = "", None, None, 0, 0
        self._unit = target_step(task, self._part)
        self._last = self._unit or len(self._part.steps)
        if self._unit is not None:  # steps before k are given: their gold script, confirmed, not yet rendered
            self._confirmed = self._unit - 1
            self._script = script(self._part, self._confirmed) if self._confirmed else ""
        return [{"role": "system", "content": SYSTEM_PROMPT}, *task.prompt]

    async def step(self, action: Action) -> StepResult:
        if self._part is None:
            raise RuntimeError("CadEnv.step before reset")
        start, renders = time.monotonic(), self._renders
        obs = []
        for call in action.tool_calls:
            why = self._bad_call(call.name, call.arguments)
            if why is not None:
                obs.append(why)
                continue
            args = dict(call.arguments)
            if call.name == "write_script":
                obs.append(self._write(args["code"]))
            elif call.name == "edit_script":
                obs.append(self._edit(args["old"], args["new"]))
            elif call.name == "render":
                obs.append(await self._render())
            else:
                obs.append(await self._confirm(args["step"]))
        done = not action.tool_calls and not action.errors
        info = {"env_seconds": time.monotonic() - start, "renders": self._renders - renders,
                "confirmed": self._confirmed}
        return StepResult(obs, done, info)

    def _bad_call(self, name: str, args: Any) -> Observation | None:
        if name not in TOOL_ARGS:
            return error_observation("unknown_tool", f"there is no tool {name!r}; the tools are "
                                     f"{', '.join(TOOL_ARGS)}", name=name)
        schema = TOOL_ARGS[name]
        args = args if isinstance(args, Mapping) else {}
        extra = sorted(set(args) - set(schema["properties"]))
        missing = [k for k in schema["required"] if k not in args]
        if extra or missing:
            why = f"unexpected argument(s) {', '.join(map(repr, extra))}" if extra else \
                f"missing argument(s) {', '.join(map(repr, missing))}"
            return error_observation("bad_arguments", f"{name}: {why}", name=name)
        for key, prop in schema["properties"].items():
            value = args[key]
            ok = isinstance(value, str) if prop["type"] == "string" else \
                isinstance(value, int) and not isinstance(value, bool)
            if not ok:
                return error_observation("bad_arguments", f"{name}: {key} must be a{'n' * (prop['type'] == 'integer')}"
                                         f" {prop['type']}, got {type(value).__name__}", name=name)
        if name != "confirm_step" and sum(len(v) for v in args.values()) > MAX_SCRIPT_CHARS:
            return error_observation("bad_arguments", f"{name}: the script may hold at most {MAX_SCRIPT_CHARS} "
                                     "characters", name=name)
        return None

    def _write(self, code: str) -> Observation:
        self._script = code
        return Observation(f"part.scad written ({len(code.splitlines())} lines). Render it to see the part.",
                           name="write_script")

    def _edit(self, old: str, new: str) -> Observation:
        count = self._script.count(old) if old else 0
        if count != 1:
            why = "`old` is empty" if not old else "`old` does not occur in part.scad" if count == 0 else \
                f"`old` occurs {count} times in part.scad; give a longer, unique piece"
            return error_observation("tool_failed", f"edit_script: {why}", name="edit_script")
        if len(self._script) - len(old) + len(new) > MAX_SCRIPT_CHARS:
            return error_observation("bad_arguments", f"edit_script: part.scad would pass {MAX_SCRIPT_CHARS} "
                                     "characters", name="edit_script")
        self._script = self._script.replace(old, new, 1)
        return Observation(f"part.scad edited ({len(self._script.splitlines())} lines). Render it to see the part.",
                           name="edit_script")

    async def _render(self) -> Observation:
        assert self._task is not None
        if not self._script.strip():
            return error_observation("tool_failed", "render: part.scad is empty; call write_script first",
                                     name="render")
        why = refusal(self._script)
        if why is not None:
            return error_observation("tool_failed", f"render refused: {why}", name="render")
        self._renders += 1
        code = self._script
        out = await self._resources.run_blocking(render, code, render_timeout(self._task), self._isolation)
        if out.error:
            return error_observation(out.error, f"render: {out.message}", name="render")
        try:
            measured = await self._resources.run_blocking(measure_stl, out.stl)
        except ValueError as e:
            return error_observation("tool_failed", f"render: {e}", name="render")
        self._rendered, self._measured = code, measured
        return Observation(report(out, measured), name="render")

    async def _confirm(self, k: int) -> Observation:
        part = self._part
        assert part is not None
        total, nxt, last = len(part.steps), self._confirmed + 1, self._last

        def fail(message: str) -> Observation:
            return error_observation("tool_failed", f"confirm_step: {message}", name="confirm_step")

        if self._confirmed == last:
            return fail(f"step {last} is confirmed and this task covers step {last} only; reply without a tool "
                        "call to finish" if last < total else
                        f"all {total} steps are already confirmed; reply without a tool call to finish")
        if k != nxt:
            return fail(f"step {k} is already confirmed; the next is step {nxt}" if 1 <= k < nxt else
                        f"this task covers step {nxt} of {total} only: confirm step {nxt}" if self._unit else
                        f"steps are confirmed in order: confirm step {nxt} (of {total}) next")
        if self._measured is None or self._rendered != self._script:
            return fail("render the current part.scad first" if self._measured is not None else
                        "nothing rendered yet: write part.scad and render it first")
        checks: list[Check] = await self._resources.run_blocking(run_checks, expect(part, k), self._measured)
        failed = [c for c in checks if not c.ok]
        if failed:
            return Observation(f"Step {k} is not confirmed: {len(failed)} of {len(checks)} checks fail. "
                               f"{failures(checks)}.", name="confirm_step")
        self._confirmed = k
        head = f"Step {k} confirmed: all {len(checks)} checks pass."
        if k == total:
            return Observation(f"{head} All {total} steps are confirmed: the part is complete. Reply without a "
                               "tool call to finish.", name="confirm_step")
        if k == last:
            return Observation(f"{head} This task covers step {k} of {total} only: it is done. Reply without a "
                               "tool call to finish.", name="confirm_step")
        return Observation(f"{head}\n{step_text(part, k + 1)}", name="confirm_step")

    def state(self) -> Any:
        if self._part is None:
            return None
        return {"script": self._rendered, "confirmed": self._confirmed, "steps": len(self._part.steps),
                "renders": self._renders}

    def score(self, task: Task, state: Any) -> list[Score]:
        part = part_of(task)
        unit = target_step(task, part)
        e = expect(part, unit or len(part.steps))
        names = {n: False for n in e.names}
        sub = {"unit": "step", "step": unit} if unit else {}
        if not isinstance(state, Mapping) or not isinstance(state.get("script"), str):
            return [Score(0.0, "env_score", {"checks": names, "measured": {}, **sub,
                                             "error": "no render of the part"})]
        confirmed = state.get("confirmed", 0)
        meta = {"confirmed": confirmed if isinstance(confirmed, int) else 0, "steps": len(part.steps), **sub}
        code = state["script"][:MAX_SCRIPT_CHARS]
        why = refusal(code)
        out = None if why else render(code, task.limits.tool_timeout, self._isolation)
        if why or out.error:
            return [Score(0.0, "env_score", {"checks": names, "measured": {}, **meta,
                                             "error": why or out.message})]
        try:
            m = measure_stl(out.stl)
        except ValueError as err:
            return [Score(0.0, "env_score", {"checks": names, "measured": {}, **meta, "error": str(err)})]
        checks = run_checks(e, m)
        value = share(checks)  # envelope checks earn only with the geometry inside (checks.earned)
        details = {"checks": {c.name: c.ok for c in checks}, "measured": m.summary(), **meta}
        if unit:  # a sub-unit: step k's own checks only, 0 when given work is broken (checks.unit_value)
            v = unit_value(part, unit, checks)
            value = v.value
            details.update(counted=list(v.counted), broken=list(v.broken))
        if value < 1:
            details["failed"] = failures(checks)
        return [Score(value, "env_score", details)]

    async def close(self) -> None:
        self._measured = None


CHECKED = ("Each step is checked on the rendered mesh: bounding box, volume, a watertight mesh, the number of "
           "bodies and of through-holes, and sections through its features")


def goal_text(part: Part) -> str:
    return (f"Build {part.title} in OpenSCAD, in {len(part.steps)} step{'s' * (len(part.steps) > 1)}. Units are "
            f"millimetres; use $fn = {num(part.fn)} for every cylinder. For each step: write or edit part.scad so it "
            "holds the whole part so far, render it, then call confirm_step with the step's number; a passing "
            f"confirmation gives the next step. {CHECKED}.\n\n"
            f"{step_text(part, 1)}")


def subunit_text(part: Part, k: int) -> str:
    """The first user message of sub-unit k: the goal, the steps given (their text and script), step k."""
    total = len(part.steps)
    head = (f"Build {part.title} in OpenSCAD, in {total} step{'s' * (total > 1)}. Units are millimetres; use "
            f"$fn = {num(part.fn)} for every cylinder. This task is step {k} of {total} only.")
    if k == 1:
        given = "part.scad is empty."
    else:
        done = "\n".join(f"{i}. {s.text}" for i, s in enumerate(part.steps[:k - 1], 1))
        given = (f"Steps 1..{k - 1} are already built and confirmed:\n{done}\n\npart.scad holds them now "
                 f"(not yet rendered):\n```\n{script(part, k - 1)}```")
    return (f"{head} {given}\n\nWrite or edit part.scad so it holds the whole part after step {k} (keep the earlier "
            f"steps: step {k}'s checks include theirs, and breaking one scores 0), render it, then call confirm_step with step {k}; when it is "
            f"confirmed, reply without a tool call. {CHECKED}.\n\n{step_text(part, k)}")
