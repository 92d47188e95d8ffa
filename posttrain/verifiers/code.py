"""Code verified by unit tests in the sandbox, with a verdict the code cannot forge.

    result = run_tests({"mode": "function", "program": src, "test": humaneval_test, "entry_point": "f"})
    result.passed, result.score, result.results   # all passed?, fraction passed, one bool per test

Task references (`Task.reference`, a dict) in three shapes:
- HumanEval: {"prompt": code prefix, "entry_point": name, "test": "def check(candidate): ..."};
- MBPP: {"tests": ["assert f(1) == 2", ...], "setup": optional code, "entry_point": optional};
- stdin/stdout: {"io": [{"input": "1 2\\n", "output": "3\\n"}, ...], "float_tol": optional}.
The `code` verifier takes the program from the completion (its last fenced code block, else the
whole text; for HumanEval, the prompt is put in front). Options (`verifier_options`): `score`
"all" (default: 1 only when every test passes) or "fraction"; `timeout` seconds per test (3);
`memory_mb` (512).

Why a pass cannot be forged. The sandbox runs `harness/judge.py`, trusted code, as its main
program; it reads the tests and a fresh random key from stdin, makes itself non-dumpable (the
solution, same uid, can then neither read its memory nor reopen its fds via /proc; pid 1 of the
sandbox holds none of its streams), and starts the solution in a separate process by exec, so
no copy of the tests or the key exists there. The tests run in the judge; every call into the
solution returns plain data, decoded into fresh builtins (an object with a rigged `__eq__` never
crosses; there are no judge frames to walk from the solution). `sys.exit` / `os._exit` end only
the solution's process: the call fails. The solution's prints go to /dev/null; the verdict is
one line with an HMAC under the key, written after every other process of the sandbox is killed.
The host accepts exactly one correctly authenticated line; a line with a bad MAC is recorded as
`forged_verdict`. Tests never live in files: decoy `tests/test_solution.py` and `conftest.py` are
planted, and touching them (or planting test or config files) is reported as `touched_tests`.
Not exit codes, not log lines, not files decide.
"""

from __future__ import annotations

import ast
import hashlib
import hmac
import json
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from posttrain.sandbox import RunRequest, Sandbox
from posttrain.sandbox.default import get_sandbox
from posttrain.core.types import Score, Task, Trajectory
from posttrain.verifiers.options import verifier_options

VERDICT = "POSTTRAIN-VERDICT "
_HARNESS = Path(__file__).parent / "harness"  # plain files read as text, never imported


def _program(*names: str) -> str:
    return "\n\n".join((_HARNESS / name).read_text() for name in names)


# the two programs sent into the sandbox, as source text: JUDGE (trusted: runs the tests, authenticates
# the verdict; judge.py first makes itself non-dumpable and cleans sys.path) and RUNNER (untrusted:
# runs the solution); both hold codec.py, the value codec they share
JUDGE = _program("judge.py", "codec.py", "judge_stdio.py") + "\n\nmain()\n"
RUNNER = _program("codec.py", "runner.py")
CODE_MAX_TOKENS = 512  # a HumanEval function body needs more room than the 256-token default limit
_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)```", re.DOTALL)


@dataclass(frozen=True)
class CodeResult:
    results: tuple[bool, ...]  # one per test, in order
    error: str | None = None  # why tests could not all run (program failed, timed out, no verdict, ...)
    events: tuple[str, ...] = ()  # violations: timeout, early_exit, touched_tests, forged_verdict, sandbox events
    judged: bool = True  # False when the task's own tests are broken (not the solution's fault)

    @property
    def passed(self) -> bool:
        return self.judged and bool(self.results) and all(self.results)

    @property
    def score(self) -> float:
        return sum(self.results) / len(self.results) if self.results else 0.0


def _count_tests(spec: dict) -> int:
    if spec.get("io") is not None:
        return len(spec["io"])
    if spec.get("tests") is not None:
        return len(spec["tests"])
    try:
        return max(1, sum(isinstance(n, ast.Assert) for n in ast.walk(ast.parse(spec.get("test") or ""))))
    except SyntaxError:
        return 1


def read_verdicts(stdout: str, key: bytes, n_jobs: int) -> tuple[dict[int, dict], list[str]]:
    """The authenticated verdict of each job in `stdout` (job -> verdict) and events. A line with
    a bad MAC (`forged_verdict`) voids the whole run; a job with two verdicts gets none."""
    good: dict[int, list[dict]] = {}
    events: list[str] = []
    for line in stdout.splitlines():
        if not line.startswith(VERDICT):
            continue
        mac, _, payload = line[len(VERDICT) :].partition(" ")
        want = hmac.new(key, payload.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(mac, want):
            events.append("forged_verdict")
            continue
        try:
            verdict = json.loads(payload)
        except json.JSONDecodeError:
            events.append("bad_verdict")
            continue
        if isinstance(verdict, dict) and verdict.get("job") in range(n_jobs):
            good.setdefault(verdict["job"], []).append(verdict)
    if "forged_verdict" in events:
        return {}, events
    events += ["duplicate_verdict" for v in good.values() if len(v) > 1]
    return {job: v[0] for job, v in good.items() if len(v) == 1}, events


def run_batch(specs: list[dict], *, sandbox: Sandbox | None = None, timeout_s: float = 3.0, memory_mb: int = 512,
              max_seconds: float = 120.0) -> list[CodeResult]:
    """Verify several programs in one sandbox run, one after another (a fresh solution process,
    an emptied work dir and no surviving process between them). A job left without a verdict
    (its run was killed or timed out) is verified again alone, so a hostile program cannot void
    the verdicts of the others."""
    sandbox = sandbox or get_sandbox()
    key = secrets.token_bytes(32)
    counts = [_count_tests(spec) for spec in specs]
    budget = min(max_seconds, sum(timeout_s * n + 2.0 for n in counts) + 3.0)
    payload = {"jobs": specs, "timeout": timeout_s, "key": key.hex(), "runner": RUNNER,
               "namespaced": getattr(sandbox, "isolation", "bwrap") == "bwrap"}
    result = sandbox.run(RunRequest(code=JUDGE, stdin=json.dumps(payload), run_timeout=budget,
                                    memory_limit_mb=memory_mb, output_limit_bytes=1 << 20))
    verdicts, events = read_verdicts(result.run.stdout if result.run else "", key, len(specs))
    events += list(result.events)
    out: list[CodeResult] = []
    for job, (spec, n) in enumerate(zip(specs, counts)):
        verdict = verdicts.get(job)
        if verdict is None and len(specs) > 1:
            out.append(run_batch([spec], sandbox=sandbox, timeout_s=timeout_s, memory_mb=memory_mb)[0])
        elif verdict is None:
            status = result.run.status.value if result.run else "not run"
            why = "forged verdict" if "forged_verdict" in events else f"no verdict ({status})"
            out.append(CodeResult(results=(False,) * n, error=why, events=tuple(events)))
        else:
            results = verdict.get("results")
            judged = isinstance(results, list)
            out.append(CodeResult(
                results=tuple(bool(r) for r in results) if judged else (),
                error=verdict.get("error"),
                events=tuple(events) + tuple(verdict.get("events") or ()),
                judged=judged,
            ))
    return out


def run_tests(spec: dict, **kw) -> CodeResult:
    """Run one program against its tests in the sandbox (see the module docstring for `spec`;
    keyword arguments as for `run_batch`)."""
    return run_batch([spec], **kw)[0]


def extract_code(text: str) -> str:
    """The last fenced code block of `text` (any language tag), else the whole text."""
    blocks = _FENCE.findall(text)
    return blocks[-1][1] if blocks else text


def _compiles(src: str) -> bool:
    try:
        compile(src, "<program>", "exec", dont_inherit=True)
        return True
    except (SyntaxError, ValueError):
        return False


def spec_for(reference: dict, completion: str, *, continuation: bool = False) -> dict:
    """The sandbox spec for a completion of a task. `continuation`: the completion continues
    the prompt (HumanEval files); otherwise the program is taken from the completion's text."""
    code = completion if continuation else extract_code(completion)
    if reference.get("io") is not None:
        return {"mode": "stdio", "program": code, "io": reference["io"], "float_tol": reference.get("float_tol")}
    prompt, entry = reference.get("prompt") or "", reference.get("entry_point")
    if continuation or (entry and not re.search(rf"^\s*def\s+{re.escape(entry)}\s*\(", code, re.MULTILINE)):
        program = prompt + code
    else:  # a whole function: after the prompt when the prompt is complete code, else after its imports
        program = prompt + "\n\n" + code
        if not _compiles(program):
            imports = [line for line in prompt.splitlines() if re.match(r"(import|from)\s", line)]
            program = "\n".join(imports + [code])
    return {"mode": "function", "program": program, "prompt": prompt, "entry_point": entry,
            "test": reference.get("test"), "tests": reference.get("tests"), "setup": reference.get("setup")}


def _options(task: Task) -> tuple[str, float, int]:
    opts = verifier_options(task, "code")
    mode = opts.get("score", "all")
    if mode not in ("all", "fraction"):
        raise ValueError(f"code verifier: option score must be 'all' or 'fraction', got {mode!r}")
    return mode, float(opts.get("timeout", 3.0)), int(opts.get("memory_mb", 512))


def _score(res: CodeResult, mode: str) -> Score | None:
    if not res.judged:
        return None
    value = res.score if mode == "fraction" else float(res.passed)
    return Score(value, "code", {"passed": sum(res.results), "tests": len(res.results),
                                 "error": (res.error or "")[:200] or None, "events": list(res.events)})


def _judgeable(task: Task) -> bool:
    ref = task.reference
    return isinstance(ref, dict) and any(ref.get(k) is not None for k in ("test", "tests", "io"))


def code(task: Task, traj: Trajectory) -> Score | None:
    return code_many(task, [traj])[0]


def code_many(task: Task, trajs: list[Trajectory]) -> list[Score | None]:
    """Several completions of one task (a GRPO group) in one sandbox run."""
    if not _judgeable(task):
        return [None] * len(trajs)
    mode, timeout, memory = _options(task)
    results = run_batch([spec_for(task.reference, t.text) for t in trajs], timeout_s=timeout, memory_mb=memory)
    return [_score(r, mode) for r in results]


code.many = code_many  # type: ignore[attr-defined]  (run_verifiers_many batches a group through it)
