"""`posttrain tasks ...`: inspect task sources."""

from __future__ import annotations

import typer

app = typer.Typer(help="Inspect task sources and build task sets.", no_args_is_help=True)


@app.command("list")
def tasks_list() -> None:
    """List every task domain available by name: registered sources, groups and reasoning-gym domains
    (JSONL task files are named by path)."""
    from posttrain.tasks import registry

    for name in registry.known_names():
        print(name)
