"""The terminal environment: Harbor-shaped task folders, a persistent shell in the bubblewrap
sandbox, verification by the task's tests in a fresh sandbox (docs/terminal.md).

    env = make_env("terminal", resources)        # TerminalEnv (env.py)
    task = load_task("posttrain/domains/terminal/data/NAME")   # TerminalTask (task.py)

task.py loads and checks a folder; session.py is the shell; env.py the Env; verify.py the
unforgeable scoring; harness/runner.py the trusted test runner inside the sandbox.
"""

from posttrain.envs.env import Resources, register_env
from posttrain.domains.terminal.env import SHELL_TOOL, TerminalEnv
from posttrain.domains.terminal.task import TerminalTask, cached_task, load_task

__all__ = ["SHELL_TOOL", "TerminalEnv", "TerminalTask", "cached_task", "load_task"]


@register_env("terminal")
def make(resources: Resources) -> TerminalEnv:
    return TerminalEnv(resources)
