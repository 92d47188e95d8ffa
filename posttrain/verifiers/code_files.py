"""`posttrain verify code`: HumanEval-format task and completion files through the sandbox.

    summary = verify_code_files("HumanEval.jsonl.gz", "samples.jsonl", "results.jsonl")

Tasks: one JSON object per line with `task_id`, `prompt`, `entry_point`, `test` (other keys,
e.g. `canonical_solution`, are ignored); `.gz` files are read as gzip. Completions: `task_id`,
`completion` (the function body continuing the prompt, as in HumanEval); several per task.
Each output line: `task_id`, `completion_id` (0, 1, ... per task, in file order), `passed`,
`score` (fraction of asserts passed), `details` (per-assert results, error, events). A bad
line of either file is a DataError naming the file and line; nothing is written then.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor

from posttrain.core.fsio import atomic_file, bad_lines, read_jsonl
from posttrain.sandbox import Sandbox
from posttrain.sandbox.default import get_sandbox
from posttrain.verifiers.code import CodeResult, run_batch, spec_for

TASK_KEYS = ("task_id", "prompt", "entry_point", "test")
COMPLETION_KEYS = ("task_id", "completion")


def _result_line(task_id: str, completion_id: int, res: CodeResult) -> dict:
    return {
        "task_id": task_id,
        "completion_id": completion_id,
        "passed": res.passed,
        "score": res.score,
        "details": {"results": list(res.results), "error": res.error, "events": list(res.events)},
    }


def verify_code_files(tasks_path, completions_path, out_path, *, sandbox: Sandbox | None = None,
                      workers: int | None = None, timeout_s: float = 3.0, batch: int = 8,
                      progress: bool = True) -> dict:
    """Verify every completion (`batch` per sandbox run, `workers` runs in flight); write
    `out_path` (JSONL, input order) atomically; return a summary."""
    tasks: dict[str, dict] = {}
    bad: list[str] = []  # every bad line of both files, reported together
    for where, rec in read_jsonl(tasks_path, TASK_KEYS, errors=bad):
        if rec["task_id"] in tasks:
            bad.append(f"{where}: duplicate task_id {rec['task_id']!r}")
        tasks.setdefault(rec["task_id"], rec)
    jobs: list[tuple[str, int, dict]] = []
    counts: dict[str, int] = {}
    for where, rec in read_jsonl(completions_path, COMPLETION_KEYS, errors=bad):
        task = tasks.get(rec["task_id"])
        if task is None:
            bad.append(f"{where}: task_id {rec['task_id']!r} is not in {tasks_path}")
            continue
        cid = counts.get(rec["task_id"], 0)
        counts[rec["task_id"]] = cid + 1
        jobs.append((rec["task_id"], cid, spec_for(task, rec["completion"], continuation=True)))
    if bad:
        raise bad_lines(bad)
    sandbox = sandbox or get_sandbox()
    workers = workers or 2 * (os.cpu_count() or 1)

    chunks = [jobs[i : i + batch] for i in range(0, len(jobs), batch)]

    def one(chunk: list[tuple[str, int, dict]]) -> list[dict]:
        results = run_batch([j[2] for j in chunk], sandbox=sandbox, timeout_s=timeout_s)
        return [_result_line(j[0], j[1], r) for j, r in zip(chunk, results)]

    lines: list[dict] = []
    with ThreadPoolExecutor(workers) as pool:
        done = pool.map(one, chunks)
        if progress:
            from rich.progress import track

            done = track(done, total=len(chunks), description="verifying", transient=True)
        for got in done:
            lines.extend(got)
    with atomic_file(out_path) as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")
    passed = sum(line["passed"] for line in lines)
    return {"completions": len(lines), "tasks": len(counts), "passed": passed,
            "pass_rate": passed / len(lines) if lines else 0.0}
