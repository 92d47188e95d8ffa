"""`posttrain tasks ...`: inspect task sources and build task sets from a user's data.

    posttrain tasks list [--json]
    posttrain tasks fetch bfcl                                                  # BFCL's data into the cache
    posttrain tasks build qa.csv --kind qa --verifier numeric --out tasks/qa   # see tasks/build.py
    posttrain tasks validate posttrain/domains/terminal/data [--json]            # see domains/terminal/validate.py
    posttrain tasks generate terminal_gen --n 50 --out DIR [--level 2] [--split test]  # then: tasks validate DIR
    posttrain tasks audit-scorers [--domains a,b] [--write]                    # see domains/reasoning_gym/audit.py
"""

from __future__ import annotations

from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from posttrain.core.errors import ConfigError
from posttrain.tasks.dedup import DEFAULT_NEAR_THRESHOLD

app = typer.Typer(help="Inspect task sources and build task sets.", no_args_is_help=True)
err = Console(stderr=True)
EXAMPLES = 3  # duplicate / leaked rows shown under the summary


@app.command("list")
def tasks_list(
    as_json: bool = typer.Option(False, "--json", help="Print a JSON array: name, kind, uses, available, fetch, description."),
) -> None:
    """List every task name: domains (generated tasks), sources (fixed datasets) and groups (several
    domains, expanded in eval suites), with where each can be used and whether its data is here
    (JSONL task files are named by path)."""
    import json

    from posttrain.tasks.registry import catalogue

    rows = catalogue()
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    out = Console()
    for kind, title in (("group", "Groups"), ("source", "Sources (fixed datasets)"), ("domain", "Domains")):
        table = Table(title=title, title_justify="left", show_lines=False)
        for col in ("name", "uses", "data", "description"):
            table.add_column(col, overflow="fold")
        for r in (r for r in rows if r["kind"] == kind):
            data = "yes" if r["available"] else f"[red]missing[/red]: {r['fetch']}"
            about = r["description"] + (f" ({len(r['members'])} members)" if "members" in r else "")
            table.add_row(r["name"], ",".join(r["uses"]), data, about)
        out.print(table)
    missing = sorted({r["fetch"] for r in rows if not r["available"]})
    out.print(f"{len(rows)} names; " + (f"fetch missing data with: {'; '.join(missing)}" if missing else "all data present"))


@app.command("fetch")
def tasks_fetch(
    what: str = typer.Argument(..., help="What to fetch: bfcl (BFCL v4's data, pinned to the checker's version)."),
    force: bool = typer.Option(False, "--force", help="Fetch again even when the cache is complete."),
    wheel: Optional[str] = typer.Option(None, "--wheel", help="Use this local wheel file instead of downloading it."),
) -> None:
    """Fetch the data a domain needs into the cache (once; later runs are offline)."""
    from posttrain.domains.bfcl import fetch

    if what != "bfcl":
        raise ConfigError(f"tasks fetch: unknown data {what!r}; known: bfcl")
    where = fetch.fetch(force=force, wheel=wheel)
    print(f"bfcl: {fetch.REQUIREMENT} data in {where}")


def failures_table(failures, dropped: bool = False) -> Table:
    what = "dropped (--skip-bad)" if dropped else "bad: nothing written but report.json (--skip-bad writes the good rows)"
    table = Table(title=f"{len(failures)} rows {what}", title_justify="left")
    table.add_column("row", style="bold")
    table.add_column("why")
    for f in failures:
        table.add_row(f.row, f.reason)
    return table


def summary_table(report) -> Table:
    dup, leak = report.count(report.duplicates, "exact"), report.count(report.leaks, "exact")
    table = Table(title=f"task set {report.domain!r}: {report.kind}, verifier {report.verifier}",
                  caption=f"-> {report.out}", title_justify="left", caption_justify="left")
    table.add_column("")
    table.add_column("rows", justify="right")
    table.add_row("read", str(report.rows))
    table.add_row("gold fails verifier (dropped)", str(len(report.failing)))
    table.add_row("duplicates: exact", str(dup))
    table.add_row("duplicates: near", str(len(report.duplicates) - dup))
    table.add_row("leaked into eval (removed): exact", str(leak))
    table.add_row("leaked into eval (removed): near", str(len(report.leaks) - leak))
    table.add_row("[bold]train.jsonl", f"[bold]{report.train}")
    table.add_row("[bold]eval.jsonl", f"[bold]{report.eval}")
    return table


def _examples(title: str, removed) -> None:
    for r in removed[:EXAMPLES]:
        err.print(f"  {title} {r.row} ({r.kind}, J={r.similarity:.2f}) repeats {r.of}: {r.text}", highlight=False)
    if len(removed) > EXAMPLES:
        err.print(f"  ... and {len(removed) - EXAMPLES} more (report.json)", highlight=False)


@app.command("build")
def tasks_build(
    input_path: str = typer.Argument(..., metavar="INPUT", help="A .jsonl or .csv file (header row) of rows."),
    kind: str = typer.Option(..., "--kind", help="qa: question, answer; code: prompt, solution, tests "
                             "(or test + entry_point). Both: optional id, split (train|eval)."),
    out: str = typer.Option(..., "--out", help="Directory for train.jsonl, eval.jsonl and report.json."),
    verifier: Optional[str] = typer.Option(None, "--verifier", help="qa: the verifier of every task (default exact; "
                                           "e.g. numeric, math). code: always code."),
    eval_fraction: float = typer.Option(0.1, "--eval-fraction", help="Rows drawn for eval when there is no split column."),
    seed: int = typer.Option(0, "--seed", help="Seed of that draw."),
    near_threshold: float = typer.Option(DEFAULT_NEAR_THRESHOLD, "--near-threshold",
                                         help="Near duplicate: word 3-gram Jaccard at least this (1: same 3-grams)."),
    domain: Optional[str] = typer.Option(None, "--domain", help="Domain and id prefix of the tasks (default: INPUT's stem)."),
    drop_failing: bool = typer.Option(False, "--skip-bad", "--drop-failing",
                                      help="Write the good rows, dropping bad ones (default: any bad row writes nothing "
                                           "but report.json)."),
    force: bool = typer.Option(False, "--force", help="Replace a non-empty --out."),
) -> None:
    """Build a validated task set: each row must be well formed and its gold pass its verifier (code: its
    tests in the sandbox), with no duplicate or train/eval leak; every bad row is reported in one pass."""
    from posttrain.tasks.build import BuildOptions, GoldError, build_tasks

    opts = BuildOptions(kind=kind, verifier=verifier, eval_fraction=eval_fraction, seed=seed,
                        near_threshold=near_threshold, domain=domain, drop_failing=drop_failing, force=force)
    try:
        report = build_tasks(input_path, out, opts)
    except GoldError as e:
        err.print(failures_table(e.failures))
        raise
    dropped = len(report.failing) + len(report.duplicates) + len(report.leaks)
    if dropped:
        err.print(failures_table(report.failing, dropped=True))
        err.print(f"--skip-bad: dropped {dropped} bad row{'s' * (dropped != 1)} ({len(report.failing)} failing, "
                  f"{len(report.duplicates)} duplicates, {len(report.leaks)} leaks)", highlight=False)
    Console().print(summary_table(report))
    _examples("duplicate", report.duplicates)
    _examples("leak", report.leaks)


@app.command("validate")
def tasks_validate(
    directory: Optional[str] = typer.Argument(None, metavar="[DIR]", help="A terminal task folder, or a directory of them."),
    source: Optional[str] = typer.Option(None, "--source", help="A generated domain (sql, document, cad) instead of DIR."),
    n: int = typer.Option(5, "--n", min=1, help="With --source: tasks per level."),
    level: Optional[list[int]] = typer.Option(None, "--level", help="With --source: the levels (repeatable; default all)."),
    split: str = typer.Option("test", "--split", help="With --source: train or test seeds."),
    as_json: bool = typer.Option(False, "--json", help='Print [{"task", "ok", "reason"}, ...] instead of a table.'),
    jobs: int = typer.Option(2, "--jobs", min=1, help="Tasks validated at the same time."),
) -> None:
    """Check tasks through their env: the untouched state must fail and the oracle must pass. DIR:
    terminal task folders (each must load; the oracle is solution/solve.sh). --source NAME: a generated
    domain's tasks, N per level (the oracle is the generator's scripted episode). Exits 1 when any fails."""
    import asyncio
    import json

    from posttrain.domains.terminal.validate import validate_dir
    from posttrain.tasks.validate import validate_generated

    if (directory is None) == (source is None):
        raise ConfigError("tasks validate: give either DIR or --source NAME")
    if source is not None:
        results = asyncio.run(validate_generated(source, n=n, levels=level or None, split=split, jobs=jobs))
    else:
        results = asyncio.run(validate_dir(directory, jobs=jobs))
    if as_json:
        print(json.dumps([r.to_json() for r in results], indent=1))
    else:
        bad = sum(not r.ok for r in results)
        table = Table(title=f"{len(results)} tasks, {bad} failing", title_justify="left")
        table.add_column("task", style="bold")
        table.add_column("ok")
        table.add_column("reason")
        for r in results:
            table.add_row(r.task, "[green]yes" if r.ok else "[red]NO", r.reason)
        Console().print(table)
    if not results or any(not r.ok for r in results):
        raise typer.Exit(1)


@app.command("generate")
def tasks_generate(
    name: str = typer.Argument(..., help="A generated source whose tasks are folders (terminal_gen)."),
    out: str = typer.Option(..., "--out", help="Directory the task folders are written to."),
    n: int = typer.Option(20, "--n", min=1, help="Tasks to write (levels and families cycle over the seeds)."),
    level: Optional[list[int]] = typer.Option(None, "--level", help="Levels (repeatable; default all)."),
    seed: int = typer.Option(0, "--seed", help="The first seed (of the split)."),
    split: str = typer.Option("train", "--split", help="train seeds, or test: the held-out seeds."),
    family: Optional[str] = typer.Option(None, "--family", help="terminal_gen: comma-separated families "
                                         "(text, traceback, unittest, build; default all)."),
) -> None:
    """Write N generated task folders to OUT (seeds SEED.. of the split); check them with `tasks validate OUT`."""
    from posttrain.tasks.generated import generator
    from posttrain.tasks.registry import make_source_tasks

    levels = level or list(range(1, generator(name).levels + 1))
    options = {"level": levels, "split": split, "dir": out, **({"family": family} if family is not None else {})}
    tasks = make_source_tasks(name, n, seed, options)
    dirs = [t.reference.get("task_dir") if isinstance(t.reference, dict) else None for t in tasks]
    if not all(isinstance(d, str) for d in dirs):
        raise ConfigError(f"tasks generate: {name}'s tasks are not task folders (a source with option dir, "
                          "e.g. terminal_gen)")
    for t, d in zip(tasks, dirs):
        print(f"{t.id}\t{d}")
    err.print(f"wrote {len(tasks)} task folders to {out}; check them with: posttrain tasks validate {out}",
              highlight=False)


@app.command("audit-scorers")
def tasks_audit_scorers(
    domains: Optional[str] = typer.Option(None, "--domains", help="Comma-separated reasoning-gym domains (default: all)."),
    n: int = typer.Option(10, "--n", min=2, help="Items per domain."),
    write: bool = typer.Option(False, "--write", help="Rewrite posttrain/domains/reasoning_gym/scorers.json (the per-domain "
                               "credit decisions) and docs/scorers.md (all domains only)."),
    check: bool = typer.Option(False, "--check", help="Exit 1 when a decision differs from the checked-in one."),
) -> None:
    """Score reasoning-gym's gold answers and typical wrong answers (empty, another item's answer, one character
    changed, negated, gold plus junk) per domain; print the table and whether each domain's scorer gives wrong
    answers credit (see docs/scorers.md)."""
    from posttrain.domains.reasoning_gym import audit as rg_audit
    from posttrain.domains.reasoning_gym import scorers as rg_scorers
    from posttrain.domains.reasoning_gym import source as rg

    names = [d.strip() for d in domains.split(",") if d.strip()] if domains else None
    for name in names or []:
        rg.check_domain(name)
    if write and names:
        raise ConfigError("tasks audit-scorers: --write rewrites the whole table; leave out --domains")
    rows = rg_audit.audit_all(n, names)
    saved = rg_scorers.decisions()
    table = Table(title=f"{len(rows)} reasoning-gym domains, {sum(bool(r.get('partial')) for r in rows)} "
                  "give wrong answers partial credit", title_justify="left")
    table.add_column("domain", no_wrap=True, min_width=max((len(r["domain"]) for r in rows), default=6))
    for col in ("gold", *rg_scorers.WRONG, "max wrong", "credit", "checked-in"):
        table.add_column(col)
    changed = []
    for r in rows:
        before = saved.get(r["domain"], {}).get("credit", "-")
        if before != r["credit"]:
            changed.append(r["domain"])
        table.add_row(r["domain"], *(rg_audit._cell(r.get(k)) for k in ("gold", *rg_scorers.WRONG)),
                      rg_audit._cell(r.get("max_wrong")), r["credit"], before if before == r["credit"] else f"[red]{before}")
    Console().print(table)
    if write:
        rg_audit.write(rows)
        err.print(f"wrote {rg_scorers.DATA} and {rg_scorers.DOC}")
    if check and changed:
        err.print(f"decisions differ from the checked-in data: {', '.join(changed)}")
        raise typer.Exit(1)
