"""The `math` verifier: a completion's final answer against a gold answer by math-verify, plus
guards against its false positives and wall-clock timeouts that hold from any thread.

    extract_answer(text)       # (1) last \\boxed{..}/\\fbox{..} (nested braces; outermost boxes), else
                               # (2) the rest of the last `Answer:`/`**Answer:**`/`Final answer:` line,
                               # else (3) the last number (-3, 1,000, 2.5, 3/4)
    math_equal(gold, answer)   # gold FIRST; never raises; returns within ~timeout_s; False when unsure
    verify_pairs(pairs, out)   # JSONL {"gold", "answer", ...} -> the same lines + "correct"

Guards: we compare numbers (no free symbols), not math-verify's rounding: exactly when both sides
are exact (rationals; radicals/pi to 40 of 60 digits), within `rel_tol` only when a float is
involved (1/2^98 != 1/2^99; big integers differing in the last digit differ). Sets match in any
order, tuples in order, intervals need equal ends and open/closed sides; `x = v` is judged by v; a
symbolic match is re-checked at three rational points; 10\\% == 0.1 == 10 as in math-verify. Words
around a number are ignored ("5 apples" == 5). Hedging never matches a one-value gold: every
boxed answer must equal the gold (so `\\boxed{2} or \\boxed{3}` fails, `\\boxed{1/2}`...`\\boxed{0.5}`
passes); candidates joined by or/and/\\lor/\\vee; a top-level comma/semicolon list; a last number
right after another number and a separator ("2 or 3"); a parsed set/tuple/interval of several
elements. Answers over MAX_ANSWER_CHARS never match.

Timeouts: math-verify's use SIGALRM (main thread only), so sympy runs in a persistent pool of
worker processes (math_worker.py, which holds the sympy side, loaded alone: no torch; min(4,
CPUs), env POSTTRAIN_MATH_WORKERS), each with its own SIGALRM timer and a 3 GiB memory cap; the
caller waits on a pipe until its deadline, then kills and replaces the worker (C-level work
ignores signals). Waiting for a busy worker counts against the deadline (run at most as many
verifying threads as workers); booting the pool on first use does not. Identical strings and
plain numbers are decided in the caller.

Verifier options (`verifier_options(task, "math")`): `rel_tol` (default 1e-6), `timeout_s` (5.0).
"""

from __future__ import annotations

import atexit
import json
import os
import re
import select
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction

from posttrain.core.fsio import atomic_file, read_jsonl
from posttrain.core.types import Score, Task, Trajectory
from posttrain.verifiers import math_worker
from posttrain.verifiers.options import verifier_options

MAX_ANSWER_CHARS = 4000
_BOOT_S = 60.0  # how long the first call waits for the pool to start (not counted in timeout_s)

# ---------------------------------------------------------------- extraction (caller side)

_BOX_TOKEN = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])\s*|\\.|[{}]", re.S)
_ANSWER_LINE = re.compile(r"^[ \t>#*_]*(?:final[ \t]+)?answer[ \t*_]*[:：](.*)$", re.I | re.M)
_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?(?:/\d+)?")
_NUMBER_HEDGE = re.compile(r"\d[\s$)}]*(?:,|;|\bor\b|\band\b|\\lor|\\vee)[\s$({]*\Z", re.I)
_DOLLAR = re.compile(r"(?<!\\)\$")


def _boxes(text: str) -> list[str]:
    """Contents of the outermost \\boxed{...}/\\fbox{...}, in order (one pass, any depth)."""
    spans, depth, open_at, pending = [], 0, [], -1
    for m in _BOX_TOKEN.finditer(text):
        tok = m.group()
        if tok.startswith(("\\boxed", "\\fbox")):
            pending = m.end()
            continue
        if tok == "{":
            depth += 1
            if m.start() == pending:
                open_at.append((depth, m.end()))
        elif tok == "}":
            if open_at and open_at[-1][0] == depth:
                start = open_at.pop()[1]
                if not open_at:
                    spans.append(text[start:m.start()])
            depth = max(depth - 1, 0)
        pending = -1
    return spans


def _final_answers(text: str) -> tuple[list[str], str | None]:
    """(every boxed answer, else [the Answer line], else [the last number]; a hedge reason or None)."""
    boxes = _boxes(text)
    if boxes:
        return [b.strip() for b in boxes], None
    lines = _ANSWER_LINE.findall(text)
    if lines:
        return [_DOLLAR.sub("", lines[-1]).strip(" \t*_").rstrip(".").strip()], None
    last = None
    for last in _NUMBER.finditer(text):
        pass
    if last is None:
        return [], None
    before = text[max(0, last.start() - 60):last.start()]
    return [last.group()], ("hedged: several numbers at the end" if _NUMBER_HEDGE.search(before) else None)


def extract_answer(text: str) -> str | None:
    """The final answer of `text` (the order is in the module docstring); None when there is none."""
    answers = _final_answers(text)[0]
    return answers[-1] if answers else None


# ---------------------------------------------------------------- string-level checks (caller side)

_SPACES = re.compile(r"\\[,;:! ]|~|\s+")
_HEDGE_WORD = re.compile(r"(?<![A-Za-z\\])(?:or|and)(?![A-Za-z])|\\(?:lor|vee|land|wedge)(?![A-Za-z])", re.I)
_THOUSANDS = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_PLAIN = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d{1,3})?")
_FRAC = re.compile(r"([-+]?)(?:(\d+)/(\d+)|\\frac\{(\d+)\}\{(\d+)\})")


def _clean(s: str) -> str:
    s = re.sub(r"\\[dt]frac(?![A-Za-z])", r"\\frac", _DOLLAR.sub("", s))
    s = re.sub(r"\\(?:left|right|displaystyle)(?![A-Za-z])", "", s)
    return _SPACES.sub(" ", s).strip().rstrip(".").strip()


def _candidates(s: str) -> list[str]:
    """The distinct answers in `s` (its boxed contents, else `s`), cleaned, without thousands commas."""
    boxes = _boxes(s) if ("\\boxed" in s or "\\fbox" in s) else []
    cleaned = (_clean(x) for x in boxes or [s])
    return list(dict.fromkeys(x.replace(",", "") if _THOUSANDS.fullmatch(x) else x for x in cleaned))


def _parts(s: str) -> int:
    """How many top-level (outside any bracket) comma/semicolon-separated parts `s` has."""
    depth, parts = 0, 1
    for ch in s:
        depth = depth + 1 if ch in "([{" else max(depth - 1, 0) if ch in ")]}" else depth
        parts += depth == 0 and ch in ",;"
    return parts


def _hedge(gold: str, answer: str) -> str | None:
    if _HEDGE_WORD.search(answer) and not _HEDGE_WORD.search(gold):
        return "hedged: candidates joined by or/and"
    if _parts(answer) > 1 and _parts(gold) == 1:
        return "hedged: a list where the gold is one value"
    return None


def _plain_number(s: str) -> tuple[Fraction, bool] | None:
    """(exact value, is a float) of a plain decimal, integer, a/b or \\frac{a}{b}; else None."""
    if len(s) > 200:
        return None
    if _PLAIN.fullmatch(s):
        return Fraction(s), any(c in s for c in ".eE")
    m = _FRAC.fullmatch(s)
    if not m or int(m.group(3) or m.group(5)) == 0:
        return None
    value = Fraction(int(m.group(2) or m.group(4)), int(m.group(3) or m.group(5)))
    return (-value if m.group(1) == "-" else value), False


def _fast_equal(gold: str, answer: str, rel_tol: float) -> bool | None:
    """True/False when decidable without sympy (identical, or both plain numbers), else None."""
    if gold == answer:
        return True
    g, a = _plain_number(gold), _plain_number(answer)
    if g is None or a is None:
        return None
    if not (g[1] or a[1]):
        return g[0] == a[0]
    return abs(g[0] - a[0]) <= Fraction(rel_tol) * max(abs(g[0]), abs(a[0]))


# ---------------------------------------------------------------- worker pool (caller side)

_WORKER_MODULE = "_posttrain_math_worker"  # math_worker.py loaded alone by file path: no torch, no registry
_WORKER_FILE = os.path.abspath(math_worker.__file__)
_BOOT = ("import importlib.util as u,sys;s=u.spec_from_file_location(%r,sys.argv[1]);"
         "m=u.module_from_spec(s);s.loader.exec_module(m);m._serve()") % _WORKER_MODULE


class _Worker:
    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", _BOOT, _WORKER_FILE], cwd="/",
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        self.buf, self.ready, self.poller = b"", False, select.poll()
        self.poller.register(self.proc.stdout.fileno())

    def read_line(self, deadline: float) -> bytes | None:
        """The next line; None at the deadline; EOFError when the worker died."""
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if self.poller.poll(max(1, int(left * 1000))):
                chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
                if not chunk:
                    raise EOFError("worker exited")
                self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line

    def kill(self) -> None:
        for step in (self.proc.kill, lambda: self.proc.wait(5), self.proc.stdin.close, self.proc.stdout.close):
            try:
                step()
            except Exception:
                pass


class _Pool:
    def __init__(self, size: int):
        self.size, self.pid, self.warm, self.closed, self.live = size, os.getpid(), False, False, 0
        self.idle: list[_Worker] = []
        self.cond = threading.Condition()

    def _acquire(self, deadline: float) -> _Worker | None:
        with self.cond:
            if self.live == 0 and not self.closed:  # first use: boot all workers in parallel
                self.idle, self.live = [_Worker() for _ in range(self.size)], self.size
            while not self.idle:
                if self.closed or not self.cond.wait(max(0.0, deadline - time.monotonic())):
                    return None
            return self.idle.pop()

    def _release(self, w: _Worker, broken: bool) -> None:
        if broken or self.closed:
            w.kill()
        with self.cond:
            if self.closed:
                self.live -= 1
            else:  # a killed worker is replaced at once: it boots while the others work
                self.idle.append(_Worker() if broken else w)
            self.cond.notify()

    def check(self, gold: str, answer: str, rel_tol: float, deadline: float) -> tuple[bool, str | None]:
        w = self._acquire(deadline)
        if w is None:
            return False, "timeout (no free worker)"
        broken = False
        try:
            if not w.ready:
                t0 = time.monotonic()
                line = w.read_line(deadline if self.warm else t0 + _BOOT_S)
                if not self.warm:  # booting the pool is not the input's fault
                    deadline += time.monotonic() - t0
                if line is None:
                    return False, "timeout (worker starting)"  # nothing sent: the worker stays
                w.ready = self.warm = True
            seconds = deadline - time.monotonic() - 0.03
            if seconds <= 0:
                return False, "timeout (waited for a worker)"
            broken = True  # until it answers
            w.proc.stdin.write(json.dumps([gold, answer, rel_tol, seconds]).encode() + b"\n")
            w.proc.stdin.flush()
            line = w.read_line(deadline)
            if line is None:
                return False, "timeout (worker killed)"
            ok, err = json.loads(line)
            broken = err == "MemoryError"  # start afresh
            return bool(ok) and err is None, err
        except (OSError, EOFError, ValueError) as e:
            broken = True
            return False, f"worker failed: {type(e).__name__}"
        finally:
            self._release(w, broken)

    def close(self) -> None:
        with self.cond:
            self.closed, idle, self.idle = True, self.idle, []
            self.live -= len(idle)
            self.cond.notify_all()
        for w in idle:
            w.kill()


_POOL: _Pool | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> _Pool:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL.closed or _POOL.pid != os.getpid():  # a forked child builds its own
            size = int(os.environ.get("POSTTRAIN_MATH_WORKERS") or 0) or min(4, os.cpu_count() or 1)
            _POOL = _Pool(max(1, size))
        return _POOL


def close() -> None:
    """Stop the worker processes (a later call starts new ones); also runs at exit."""
    pool = _POOL
    if pool is not None and pool.pid == os.getpid():
        pool.close()


atexit.register(close)


def _equal(gold, answers, timeout_s: float, rel_tol: float) -> tuple[bool, str | None]:
    """(equal, why it was not judged equal or None) for an answer string or several (all must
    equal the gold, so boxing several different values never matches); never raises."""
    deadline = time.monotonic() + timeout_s
    try:
        answers = [answers] if isinstance(answers, str) else answers
        if not isinstance(gold, str) or not all(isinstance(a, str) for a in answers):
            return False, "gold and answer must be strings"
        if sum(map(len, answers)) > 4 * MAX_ANSWER_CHARS:
            return False, f"answer over {MAX_ANSWER_CHARS} characters"
        golds, cands = _candidates(gold), list(dict.fromkeys(c for a in answers for c in _candidates(a)))
        if len(golds) != 1 or not golds[0]:
            return False, "the gold is empty or boxes several different answers"
        if not cands or not all(cands) or len(cands) > 4:
            return False, "hedged: more than 4 different boxed answers" if cands else "empty answer"
        for a in cands:
            ok, err = _equal1(golds[0], a, rel_tol, deadline)
            if not ok:
                return False, err or (f"hedged: boxed {a[:50]!r} differs from the gold" if len(cands) > 1 else None)
        return True, None
    except Exception as e:  # never raise on hostile input
        return False, f"{type(e).__name__}: {e}"[:200]


def _equal1(gold: str, answer: str, rel_tol: float, deadline: float) -> tuple[bool, str | None]:
    if len(answer) > MAX_ANSWER_CHARS:
        return False, f"answer over {MAX_ANSWER_CHARS} characters"
    hedge = _hedge(gold, answer)
    if hedge:
        return False, hedge
    fast = _fast_equal(gold, answer, rel_tol)
    return (fast, None) if fast is not None else _pool().check(gold, answer, rel_tol, deadline)


def math_equal(gold: str, answer: str, *, timeout_s: float = 5.0, rel_tol: float = 1e-6) -> bool:
    """Whether `answer` equals `gold` mathematically (module docstring); False on timeout, hedging
    or any error. Safe from any thread; returns within about timeout_s."""
    return _equal(gold, answer, timeout_s, rel_tol)[0]


# ---------------------------------------------------------------- verifier and batch check


def math_verifier(task: Task, traj: Trajectory) -> Score | None:
    """1.0 when the completion's final answer equals the gold, else 0.0; None without a gold."""
    ref = task.reference
    gold = ref.get("answer") if isinstance(ref, dict) else ref
    if gold is None:
        return None
    gold, opts = str(gold), verifier_options(task, "math")
    try:
        answers, err = _final_answers(traj.text if isinstance(traj.text, str) else "")
    except Exception as e:  # never raise on hostile completions
        answers, err = [], type(e).__name__
    ok = False
    if not answers or err:
        err = err or "no answer found"
    else:
        ok, err = _equal(gold, answers, float(opts.get("timeout_s", 5.0)), float(opts.get("rel_tol", 1e-6)))
    details = {"extracted": answers[-1][:200] if answers else None, "gold": gold[:200]}
    return Score(float(ok), "math", {**details, "error": err[:200]} if err else details)


def verify_pairs(pairs_path, out_path, *, timeout_s: float = 5.0, rel_tol: float = 1e-6) -> dict:
    """Judge each JSONL line {"gold", "answer", ...}; write it with "correct" added to `out_path`
    (atomically; nothing is written when a line is bad). Returns {"n", "correct", "accuracy",
    "errors"} (errors: pairs that timed out or whose worker failed; they count as not correct)."""
    rows = [row for _, row in read_jsonl(pairs_path, required=("gold", "answer"))]
    with ThreadPoolExecutor(max_workers=_pool().size) as ex:  # one thread per worker: no queueing
        results = list(ex.map(lambda r: _equal(r["gold"], r["answer"], timeout_s, rel_tol), rows))
    with atomic_file(out_path, "w") as f:
        for row, (ok, _) in zip(rows, results):
            f.write(json.dumps({**row, "correct": ok}, ensure_ascii=False) + "\n")
    correct = sum(ok for ok, _ in results)
    errors = sum(1 for _, err in results if err and err.startswith(("timeout", "worker failed")))
    return {"n": len(rows), "correct": correct, "accuracy": correct / len(rows) if rows else 0.0, "errors": errors}
