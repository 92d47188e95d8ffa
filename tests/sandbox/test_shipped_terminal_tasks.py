"""Every shipped terminal task folder passes `posttrain tasks validate`: through the terminal env in the
real sandbox, its untouched state fails and its oracle solution passes (CI runs this on every change)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import posttrain.domains.terminal.validate as _validate
from posttrain.domains.terminal.validate import validate_dir

SHIPPED = Path(_validate.__file__).parent / "data"


def test_every_shipped_task_validates():
    folders = sorted(p.name for p in SHIPPED.iterdir() if p.is_dir())
    results = asyncio.run(validate_dir(SHIPPED, jobs=2))
    assert [r.task for r in results] == folders and len(folders) >= 12
    bad = [f"{r.task}: {r.reason}" for r in results if not r.ok]
    assert not bad, bad
    assert all(r.initial is not None and r.initial < 1.0 and r.oracle == 1.0 for r in results)


def test_rename_config_key_falls_no_more_to_links_to_the_expected_copy():
    """The shipped task that fell to the symlink class: each .ini linked to the verifier's expected copy
    (mounted at /tests) compared a file with itself. Now the link refuses the workspace (and the task's
    own test_no_links would fail it too)."""
    from posttrain.domains.terminal.env import TerminalEnv
    from posttrain.domains.terminal.source import terminal_task
    from posttrain.domains.terminal.task import load_task
    from posttrain.envs.env import Action, ToolCall

    link_all = ("cd conf && for f in $(find . -name '*.ini'); do rm \"$f\"; "
                "ln -s \"/tests/expected/conf/$f\" \"$f\"; done; ls -l . db")
    task = terminal_task(load_task(SHIPPED / "rename-config-key"))

    async def play():
        env = TerminalEnv()
        try:
            await env.reset(task)
            await env.step(Action(text="", tool_calls=(ToolCall("shell", {"command": link_all}),)))
            return env.score(task, env.state())[0]
        finally:
            await env.close()

    score = asyncio.run(play())
    assert score.value == 0.0 and "link_out" in score.details["events"], score.details
