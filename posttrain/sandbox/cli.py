"""`posttrain sandbox ...` commands (placeholder until the sandbox server lands)."""

import typer

app = typer.Typer(help="Run code in the sandbox, or serve the sandbox over HTTP.", no_args_is_help=True)
