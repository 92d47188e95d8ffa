"""`posttrain verify ...`: check files of answers, and audit a run's verifiers against humans.

    posttrain verify code --tasks TASKS.jsonl --completions COMPLETIONS.jsonl --out RESULTS.jsonl
    posttrain verify math --pairs PAIRS.jsonl --out RESULTS.jsonl
    posttrain verify tools --category simple_python --completions C.jsonl --out R.jsonl [--parser hermes]
    posttrain verify spotcheck RUN_DIR --n 50          # -> RUN_DIR/spotcheck/spotcheck.{html,jsonl}
    posttrain verify calibrate RUN_DIR --labels FILE   # precision / recall per verifier, and
                                                       # RUN_DIR/verifier_thresholds.json

Bad input (a broken line, a missing file) is one error line naming the file and line (exit 2).
"""

from __future__ import annotations

from typing import Optional

import typer
from rich.console import Console

app = typer.Typer(help="Verify answer files; spot-check and calibrate a run's verifiers.", no_args_is_help=True)
err = Console(stderr=True)


@app.command("code")
def code(
    tasks: str = typer.Option(..., "--tasks", help="HumanEval-format tasks: task_id, prompt, entry_point, test (.jsonl or .jsonl.gz)."),
    completions: str = typer.Option(..., "--completions", help="task_id, completion (the body continuing the prompt)."),
    out: str = typer.Option(..., "--out", help="Results JSONL: task_id, completion_id, passed, score, details."),
    timeout: float = typer.Option(3.0, "--timeout", help="Seconds per test."),
    workers: Optional[int] = typer.Option(None, "--workers", help="Sandbox runs in flight (default: 2 per core)."),
    unisolated: bool = typer.Option(False, "--unisolated", help="Run without bubblewrap (rlimits only): trusted code only."),
) -> None:
    """Run each completion against its task's tests in the sandbox."""
    from posttrain.sandbox import LocalSandbox
    from posttrain.verifiers.code_files import verify_code_files

    with LocalSandbox(isolation="none" if unisolated else "bwrap", max_queue=256) as sandbox:
        s = verify_code_files(tasks, completions, out, sandbox=sandbox, workers=workers, timeout_s=timeout)
    err.print(f"[bold green]verified[/] {s['completions']} completions of {s['tasks']} tasks: "
              f"{s['passed']} passed ({s['pass_rate']:.1%}) -> {out}")


@app.command("math")
def math(
    pairs: str = typer.Option(..., "--pairs", help="JSONL lines with `gold` and `answer` (other keys are kept)."),
    out: str = typer.Option(..., "--out", help="The same lines plus `correct`."),
) -> None:
    """Check answer equivalence (math-verify, gold first, with our false-positive guards)."""
    from posttrain.verifiers.math import verify_pairs

    s = verify_pairs(pairs, out)
    err.print(f"[bold green]checked[/] {s['n']} pairs: {s['correct']} correct ({s['accuracy']:.1%}) -> {out}")


@app.command("tools")
def tools(
    category: str = typer.Option(..., "--category", help="A BFCL v4 single-turn category: simple_python, multiple, parallel, "
                                                         "parallel_multiple, irrelevance, live_simple, ..."),
    completions: str = typer.Option(..., "--completions", help="JSONL lines with `id` (a BFCL id) and `completion` (raw model text)."),
    out: str = typer.Option(..., "--out", help="Results JSONL: id, passed, error."),
    parser: str = typer.Option("hermes", "--parser", help="Tool-call format of the completions: hermes, llama3_json, pythonic."),
    keep_dots: bool = typer.Option(False, "--keep-dots", help="The model saw BFCL's function names with dots "
                                                              "(default: '.' became '_', as in our tool schemas)."),
) -> None:
    """Score raw function-calling completions with our BFCL AST checker (the bfcl_ast verifier's rules)."""
    from posttrain.domains.bfcl.cli import verify_tools_files

    s = verify_tools_files(category, completions, out, parser=parser, dots=keep_dots)
    err.print(f"[bold green]checked[/] {s['completions']} completions of {s['ids']} {category} entries: "
              f"{s['passed']} passed (accuracy {s['accuracy']:.1%}) -> {out}")


@app.command("spotcheck")
def spotcheck(
    run_dir: str = typer.Argument(..., help="An RL run directory (with rollouts/)."),
    n: int = typer.Option(50, "--n", min=1, help="Trajectories to sample, spread over domain x verdict."),
    seed: int = typer.Option(0, "--seed", help="Sampling seed."),
    out: Optional[str] = typer.Option(None, "--out", help="Output directory (default RUN_DIR/spotcheck)."),
) -> None:
    """Export a stratified sample of scored trajectories as HTML and JSONL for labelling."""
    from posttrain.verifiers.spotcheck import spotcheck as run_spotcheck

    res = run_spotcheck(run_dir, n, seed=seed, out_dir=out)
    if res.skipped:
        err.print(f"[yellow]skipped {res.skipped} broken rollout lines[/], e.g. {', '.join(res.skipped_at[:3])}")
    drawn = sum(d for _, d in res.strata.values())
    err.print(f"[bold green]spot check[/]: {drawn} samples from {len(res.strata)} strata -> {res['html']}\n"
              f"label them in {res['jsonl']} (label: true/false), then run `posttrain verify calibrate {run_dir}`")


@app.command("calibrate")
def calibrate(
    run_dir: str = typer.Argument(..., help="The run directory the labels came from."),
    labels: Optional[str] = typer.Option(None, "--labels", help="Labelled spot-check JSONL (default RUN_DIR/spotcheck/spotcheck.jsonl)."),
    thresholds_out: Optional[str] = typer.Option(
        None, "--thresholds-out",
        help="Where to write {verifier: F1-best threshold} for the score-valued verifiers "
             "(default RUN_DIR/verifier_thresholds.json); apply it with a domain's "
             "`verifier_thresholds: FILE` in the RL config."),
) -> None:
    """Precision and recall of each verifier against human labels; writes F1-best thresholds for
    score-valued verifiers to a file a domain's `verifier_thresholds` applies."""
    from posttrain.verifiers.calibrate import calibrate as run_calibrate
    from posttrain.verifiers.calibrate import format_calibration, thresholds_document

    report = run_calibrate(run_dir, labels, thresholds_out)
    print(format_calibration(report))
    thresholds = thresholds_document(report)["thresholds"]
    shown = ", ".join(f"{k}={v:.3g}" for k, v in thresholds.items()) or "none (no score-valued verifier)"
    err.print(f"[bold green]thresholds[/]: {shown} -> {report['thresholds_file']}\n"
              f"apply them with `verifier_thresholds: {report['thresholds_file']}` on a domain under `tasks:`")
