"""The worker side of the `math` verifier (posttrain.verifiers.math holds the caller side):

    _sympy_equal(gold, answer, rel_tol)  # math-verify's parse/verify plus our guards (math.py's
                                         # docstring): numbers exact or within rel_tol, sets,
                                         # tuples, intervals, `x = v` judged by v, spot checks
    _serve()                             # a worker's loop: [gold, answer, rel_tol, seconds] JSON
                                         # lines in, [ok, error] lines out

The caller's pool starts each worker as `python -c <boot>` that loads this file alone by file
path (module name `_posttrain_math_worker`) and calls _serve. That is why this module imports
nothing from posttrain (stdlib, sympy and math_verify only): the posttrain modules pull in torch
and the verifier registry, which a worker must not load. sympy and math_verify are imported inside
the functions, so importing this module (as math.py does) is cheap. Each worker caps its
address space at 3 GiB (_MEM_BYTES) and times each check with a SIGALRM timer.
"""

from __future__ import annotations

import json
import re
import sys

_MEM_BYTES = 3 << 30
_E_NOTATION = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)[eE]([-+]?\d+)(?![\w.])")


def _sympy_equal(gold: str, answer: str, rel_tol: float) -> bool:
    import sympy as sp
    from math_verify import parse, verify

    pg, pa = (parse("$" + _E_NOTATION.sub(r"\1\\times 10^{\2}", s) + "$", parsing_timeout=None) for s in (gold, answer))
    if not pg or not pa:
        return False
    g = next((x for x in pg if not isinstance(x, str)), None)
    a = next((x for x in pa if not isinstance(x, str)), None)
    if g is not None and a is not None:
        if isinstance(g, sp.Eq) and isinstance(a, sp.Eq) and g.lhs == a.lhs and g.lhs.is_Symbol:
            g, a = g.rhs, a.rhs  # x = u vs x = v: judge u vs v
        elif isinstance(a, sp.Eq) and not isinstance(g, sp.core.relational.Relational):
            a = a.rhs  # x = v vs v
        elif isinstance(g, sp.Eq) and not isinstance(a, sp.core.relational.Relational):
            g = g.rhs
        judged = _judge(g, a, rel_tol)
        if judged is not None:
            return judged
    if not verify(pg, pa, timeout_seconds=None):  # gold first: its argument order matters
        return False
    return g is None or a is None or _spot_check(g, a, rel_tol)


def _is_num(x) -> bool:
    import sympy as sp

    return isinstance(x, sp.Expr) and not isinstance(x, sp.MatrixExpr) and bool(x.is_number)


def _any_all(results: list, need_all: bool) -> bool | None:
    """all() (or any()) over True/False/None results, None when the unknowns decide."""
    decisive, other = (False, True) if need_all else (True, False)
    return decisive if decisive in results else (None if None in results else other)


def _judge(g, a, tol: float) -> bool | None:
    """Our decision on numbers, sets, tuples and intervals; None defers to math-verify."""
    import sympy as sp

    if _is_num(g) and _is_num(a):
        pct = [[x.doit(), x.args[0]] if isinstance(x, sp.Mul) and len(x.args) == 2
               and x.args[1] == sp.UnevaluatedExpr(sp.Rational(1, 100)) else [x.doit()] for x in (g, a)]
        return _any_all([_num_equal(u, v, tol) for u in pct[0] for v in pct[1]], need_all=False)
    if _is_num(g) and isinstance(a, (sp.FiniteSet, sp.Tuple, sp.Interval, sp.Union)):
        return _judge(g, a.args[0], tol) if isinstance(a, sp.FiniteSet) and len(a) == 1 else False
    if isinstance(g, sp.Interval) and isinstance(a, sp.Interval):
        if (g.left_open, g.right_open) != (a.left_open, a.right_open):
            return False
        return _any_all([_judge(g.start, a.start, tol), _judge(g.end, a.end, tol)], need_all=True)
    if isinstance(g, sp.Tuple) and isinstance(a, sp.Tuple):
        return len(g) == len(a) and _any_all([_judge(x, y, tol) for x, y in zip(g, a)], need_all=True)
    if isinstance(g, (sp.FiniteSet, sp.Union)) and type(g) is type(a):
        left = list(a.args)
        if len(left) != len(g.args):
            return False
        for x in g.args:  # greedy matching: equality here is exact or within a tight tolerance
            found = [_judge(x, y, tol) for y in left]
            if True not in found:
                return None if None in found else False
            left.pop(found.index(True))
        return True
    return None


def _num_equal(x, y, tol: float) -> bool | None:
    """Numbers: exact unless a float is involved (then relative tolerance); None when unknowable."""
    import sympy as sp

    if x.has(sp.nan) or y.has(sp.nan):
        return False
    if x.is_infinite or y.is_infinite or x.has(sp.zoo) or y.has(sp.zoo) or (x.is_Rational and y.is_Rational):
        return x == y
    try:
        d, s = abs(sp.N(x - y, 60)), max(abs(sp.N(x, 30)), abs(sp.N(y, 30)))
        if x.has(sp.Float) or y.has(sp.Float):
            return bool(d <= tol * s)
        return bool(d == 0 or d <= sp.Float("1e-40", 60) * s)
    except TypeError:  # truth value unknown (e.g. not real)
        return None


def _spot_check(g, a, tol: float) -> bool:
    """False when expressions g and a (same free symbols) differ at one of three rational points."""
    import sympy as sp

    if not (isinstance(g, sp.Expr) and isinstance(a, sp.Expr)) or g.free_symbols != a.free_symbols:
        return True
    syms = sorted(g.free_symbols, key=str)
    for k in range(3):
        point = {s: sp.Rational(3 + 4 * k + 2 * i, 7 + 2 * i) for i, s in enumerate(syms)}
        try:
            gv, av = g.subs(point), a.subs(point)
            if _is_num(gv) and _is_num(av) and _judge(gv, av, tol) is False:
                return False
        except Exception:
            continue
    return True


def _serve() -> None:
    """A worker process's main loop: a JSON line [gold, answer, rel_tol, seconds] in, [ok, error] out."""
    import logging
    import resource
    import signal

    from math_verify.errors import TimeoutException  # a BaseException: math-verify's handlers let it pass

    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    resource.setrlimit(resource.RLIMIT_AS, (_MEM_BYTES if hard < 0 else min(_MEM_BYTES, hard), hard))
    logging.disable(logging.CRITICAL)
    armed = [False]

    def on_alarm(*_):
        if armed[0]:
            raise TimeoutException

    signal.signal(signal.SIGALRM, on_alarm)
    _sympy_equal("1", "x", 1e-6)  # import sympy, math-verify and its parsers before saying "ready"
    out = sys.stdout.buffer
    out.write(b"ready\n")
    out.flush()
    for line in sys.stdin.buffer:  # ends when the caller closes the pipe (or exits)
        ok, err = False, None
        try:
            try:
                gold, answer, tol, seconds = json.loads(line)
                armed[0] = True
                signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001), 0.05)  # repeats if swallowed
                ok = bool(_sympy_equal(gold, answer, tol))
            finally:
                armed[0] = False
                signal.setitimer(signal.ITIMER_REAL, 0)
        except TimeoutException:
            err = "timeout"
        except BaseException as e:  # MemoryError, RecursionError, sympy's own errors
            err = type(e).__name__
        out.write(json.dumps([ok, err]).encode() + b"\n")
        out.flush()

