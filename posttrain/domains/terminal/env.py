"""TerminalEnv: an episode in a persistent shell over a terminal task's files, scored by its tests.

    env = make_env("terminal", resources)
    messages = await env.reset(task)          # task.reference = {"task_dir": "/abs/path/NAME"}
    obs, done, info = await env.step(action)  # each "shell" call runs in the episode's shell
    state = env.state()                       # stops the episode's processes; the final files as JSON
    scores = env.score(task, state)           # [Score(reward, "env_score", details)] from `state` alone
    await env.close()

reset: a fresh host work dir with exactly the task's environment/ files (the same bytes for every
episode), environment/setup.sh run once in its own sandbox and then deleted (its output is not
shown), then the episode's shell (session.py). The model gets a system message (a Linux shell,
/work, the `shell` tool, answer without a tool call when done) and instruction.md.

step: every tool call of the turn in order. An unknown tool, a missing / non-string / extra
argument is an error observation (`unknown_tool`, `bad_arguments`) and runs nothing; a command
past the task's command timeout is `tool_timeout` with its partial output (the shell was
restarted). The turn's parse errors (`action.errors`) are the loop's to report (envs/episode.py
turns each into an error observation): here they only keep the turn from ending the episode.
A turn without any tool call or parse error ends the episode. `info`: env_seconds, commands,
timeouts, restarts.

score: verify.py, in a fresh sandbox, never with a process of the episode alive; the solution
is never visible to an episode. Only `posttrain tasks validate` builds the env with
`with_solution=True`: solution/ is then mounted read-only at /solution and `run_oracle()` runs
`bash /solution/solve.sh` through the same shell. A sandbox that cannot start is an InfraError.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
import time
from typing import Any, Mapping

from posttrain.envs.env import (
    Action,
    InfraError,
    Observation,
    Resources,
    StepResult,
    error_observation,
)
from posttrain.domains.terminal.session import (
    CommandOutput,
    SessionLimits,
    ShellSession,
    cpu_seconds_for,
    make_work_root,
    new_work_dir,
    shared_isolation,
    write_files,
)
from posttrain.domains.terminal.task import TerminalTask, cached_task
from posttrain.domains.terminal.verify import verify
from posttrain.domains.terminal.workspace import snapshot
from posttrain.sandbox.isolation import BwrapIsolation
from posttrain.sandbox.workdir import remove_work_dir
from posttrain.core.types import Message, Score, Task

SHELL_TOOL = {
    "type": "function",
    "function": {
        "name": "shell",
        "description": "Run one bash command in the persistent shell (working directory /work at the start). "
                       "Returns its output (stdout and stderr, long output cut in the middle) and exit code. "
                       "Environment variables and the current directory persist between calls.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "the bash command line to run"}},
            "required": ["command"],
            "additionalProperties": False,
        },
    },
}
SYSTEM_PROMPT = (
    "You are working in a Linux shell (bash) in a sandbox without network access. Your working "
    "directory is /work. Run commands with the `shell` tool, one command line per call; you get its "
    "output and exit code back. When you have finished the task, reply without a tool call."
)
RESTART_NOTE = ("a new shell was started in /work: files are kept; environment variables, the current "
                "directory and background processes are not")
_root_lock = threading.Lock()
_root: str | None = None


def work_root() -> str:
    """This process's host directory for episode and verification dirs (removed at exit)."""
    global _root
    with _root_lock:
        if _root is None:
            _root = make_work_root()
            atexit.register(shutil.rmtree, _root, True)
        return _root


def observation(out: CommandOutput, timeout: float) -> Observation:
    text = out.output if not out.output or out.output.endswith("\n") else out.output + "\n"
    if out.timed_out:
        return Observation(f"Error (tool_timeout): the command did not finish within {timeout:g}s and was "
                           f"killed; {RESTART_NOTE}. Output so far:\n{text}", name="shell", error="tool_timeout")
    if out.reason == "disk_limit":
        return Observation(f"Error (tool_failed): the working directory passed its disk quota; the shell was "
                           f"killed and {RESTART_NOTE}. Delete large files.\n{text}", name="shell", error="tool_failed")
    if out.restarted:
        return Observation(f"{text}[the shell exited with code {out.exit_code}; {RESTART_NOTE}]", name="shell")
    return Observation(f"{text}[exit code {out.exit_code}]", name="shell")


class TerminalEnv:
    tools = [SHELL_TOOL]

    def __init__(self, resources: Resources | None = None, *, isolation: BwrapIsolation | None = None,
                 with_solution: bool = False, limits: SessionLimits | None = None) -> None:
        self._resources = resources or Resources()
        self._isolation = isolation
        self._with_solution = with_solution
        self._limits = limits
        self._task: TerminalTask | None = None
        self._session: ShellSession | None = None
        self._work: str | None = None
        self._solution: str | None = None

    def _iso(self) -> BwrapIsolation:
        if self._isolation is None:
            self._isolation = shared_isolation()
        return self._isolation

    def _session_limits(self, task: TerminalTask) -> SessionLimits:
        base = self._limits or SessionLimits()
        return SessionLimits(**{**base.__dict__, "cpu_seconds": cpu_seconds_for(task.agent_timeout)})

    async def reset(self, task: Task) -> list[Message]:
        ref = task.reference
        if not isinstance(ref, Mapping) or not isinstance(ref.get("task_dir"), str):
            raise ValueError(f"terminal task {task.id}: reference must be {{'task_dir': path}}, got {ref!r}")
        self._task = tt = cached_task(ref["task_dir"])
        iso = self._iso()
        files = {rel: (f.data, f.mode) for rel, f in tt.environment.items()}
        self._work = new_work_dir(work_root(), files, iso)
        limits = self._session_limits(tt)
        if "setup.sh" in tt.environment:
            await self._setup(tt, iso, limits)
        binds = []
        if self._with_solution:
            self._solution = tempfile.mkdtemp(prefix="solution-", dir=work_root())
            write_files(self._solution, {rel: (f.data, f.mode | 0o444) for rel, f in tt.solution.items()})
            for dirpath, _d, _f in os.walk(self._solution):
                os.chmod(dirpath, 0o755)
            binds.append((self._solution, "/solution"))
        self._session = ShellSession(self._work, isolation=iso, limits=limits, max_output_bytes=tt.max_output_bytes,
                                     ro_binds=binds)
        await self._session.start()
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": tt.instruction}]

    async def _setup(self, tt: TerminalTask, iso: BwrapIsolation, limits: SessionLimits) -> None:
        setup = ShellSession(self._work, isolation=iso, limits=limits, max_output_bytes=2000)
        try:
            await setup.start()
            out = await setup.run("bash setup.sh", timeout=max(tt.verifier_timeout, tt.command_timeout))
        finally:
            await setup.close()
        os.unlink(os.path.join(self._work, "setup.sh"))
        if out.timed_out or out.exit_code != 0:
            last = (out.output.strip().splitlines() or ["no output"])[-1][:200]
            why = "timed out" if out.timed_out else f"exited with code {out.exit_code}"
            raise RuntimeError(f"{tt.path}/environment/setup.sh {why}: {last}")

    async def step(self, action: Action) -> StepResult:
        if self._session is None or self._task is None:
            raise RuntimeError("TerminalEnv.step before reset")
        start = time.monotonic()
        obs: list[Observation] = []
        commands = timeouts = 0
        restarts = self._session.restarts
        for call in action.tool_calls:
            if call.name != "shell":
                obs.append(error_observation("unknown_tool", f"there is no tool {call.name!r}; the only tool is "
                                             "shell(command)", name=call.name))
                continue
            args = call.arguments if isinstance(call.arguments, Mapping) else {}
            extra = sorted(set(args) - {"command"})
            if not isinstance(args.get("command"), str) or extra:
                why = f"unexpected argument(s) {', '.join(map(repr, extra))}" if extra else \
                    "the argument 'command' (a string) is required"
                obs.append(error_observation("bad_arguments", f"shell: {why}", name="shell"))
                continue
            out = await self._session.run(args["command"], self._task.command_timeout)
            commands += 1
            timeouts += out.timed_out
            obs.append(observation(out, self._task.command_timeout))
        done = not action.tool_calls and not action.errors
        info = {"env_seconds": time.monotonic() - start, "commands": commands, "timeouts": timeouts,
                "restarts": self._session.restarts - restarts}
        return StepResult(obs, done, info)

    async def run_oracle(self) -> CommandOutput:
        """`bash /solution/solve.sh` in the episode's shell (only with `with_solution=True`)."""
        if not self._with_solution or self._session is None or self._task is None:
            raise RuntimeError("run_oracle needs TerminalEnv(with_solution=True) after reset")
        return await self._session.run("bash /solution/solve.sh", self._task.agent_timeout)

    def state(self) -> Any:
        """Stops every process of the episode, then snapshots the work dir (workspace.snapshot)."""
        if self._work is None or self._task is None:
            return None
        if self._session is not None:
            self._session.kill_now()
        return snapshot(self._work, self._task.path)

    def score(self, task: Task, state: Any) -> list[Score]:
        if not isinstance(state, Mapping) or not isinstance(state.get("task_dir"), str):
            return [Score(0.0, "env_score", {"checks": {}, "events": ["no_state"], "error": "no final state"})]
        tt = cached_task(state["task_dir"])
        try:
            return [verify(tt, dict(state), isolation=self._iso(), work_root=work_root())]
        except OSError as e:  # the host could not write the verification dir: not the episode's fault
            raise InfraError(f"terminal verifier: {e}") from e

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        for path in (self._work, self._solution):
            if path is not None:
                remove_work_dir(path)
        self._work = self._solution = None
