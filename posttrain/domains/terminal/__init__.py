"""The terminal environment: Harbor-shaped task folders, a persistent shell in the bubblewrap
sandbox, verification by the task's tests in a fresh sandbox (docs/terminal.md).

    env = make_env("terminal", resources)        # TerminalEnv (env.py)
    task = load_task("posttrain/domains/terminal/data/NAME")   # TerminalTask (task.py)

task.py loads and checks a folder; session.py is the shell; env.py the Env; verify.py the
unforgeable scoring; harness/runner.py the trusted test runner inside the sandbox; validate.py
`posttrain tasks validate DIR`; source.py the `terminal` task source; generate/ and gen_source.py
the generated `terminal_gen` source (task folders from family, level and seed).
"""

from posttrain.envs.env import register_env
from posttrain.tasks.registry import register_source

register_env("terminal", "posttrain.domains.terminal.env:TerminalEnv")
register_source("terminal", "posttrain.domains.terminal.source:terminal",
                description="terminal tasks: a shell in the bubblewrap sandbox, scored by its tests")

from posttrain.domains.terminal import gen_source  # noqa: E402,F401  (registers the generated `terminal_gen` source)
