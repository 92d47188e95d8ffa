"""The UNTRUSTED side of the code verifier: runs in the sandbox, in its own process, started by
`judge.py` with `python3 -I -B -c <this source>`. Nothing it says is believed: it only answers
calls with plain data, which the judge decodes into fresh builtin objects.

Protocol on fds 0/1 (duplicated to private fds before the solution runs; the solution's own
stdin, stdout and stderr go to /dev/null): one JSON message per line.
    judge -> runner  {"program": SRC}                    runner -> {"ok": true, "names": {name: "call"|"data"}}
    judge -> runner  {"call": NAME, "args": [..], "kwargs": [[k, v], ..]}   -> {"value": V} | {"raise": CLS, "msg": S}
    judge -> runner  {"get": NAME}                        -> {"value": V} | {"raise": ...}
Values use the codec below (tags for tuple, set, dict with any keys, bytes, complex, special floats).
"""

import base64
import json
import math
import os
import sys
import types

# started with -S (no site: faster); the system's package dirs are still importable
sys.path += [p for p in ("/usr/local/lib/python3.%d/dist-packages" % sys.version_info[1],
                         "/usr/lib/python3/dist-packages") if os.path.isdir(p)]

_rpc_in = os.fdopen(os.dup(0), "rb")
_rpc_out = os.fdopen(os.dup(1), "wb", buffering=0)
_null = os.open(os.devnull, os.O_RDWR)
for _fd in (0, 1, 2):
    os.dup2(_null, _fd)
os.close(_null)
_ITERATORS = (types.GeneratorType, map, filter, zip, enumerate, reversed, range)


def _enc(v, depth=0):
    if depth > 200:
        raise ValueError("value nested too deeply")
    if v is None:
        return None
    if isinstance(v, bool):
        return bool(v)
    if isinstance(v, str):
        return str(v)
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return float(v) if math.isfinite(v) else {"$f": repr(float(v))}
    if isinstance(v, tuple):
        return {"$t": [_enc(x, depth + 1) for x in v]}
    if isinstance(v, list):
        return [_enc(x, depth + 1) for x in v]
    if isinstance(v, frozenset):
        return {"$fs": [_enc(x, depth + 1) for x in v]}
    if isinstance(v, set):
        return {"$s": [_enc(x, depth + 1) for x in v]}
    if isinstance(v, dict):
        return {"$d": [[_enc(k, depth + 1), _enc(x, depth + 1)] for k, x in v.items()]}
    if isinstance(v, (bytes, bytearray)):
        return {"$b": base64.b64encode(bytes(v)).decode()}
    if isinstance(v, complex):
        return {"$c": [_enc(v.real), _enc(v.imag)]}
    if isinstance(v, _ITERATORS):
        return {"$it": [_enc(x, depth + 1) for x in list(v)[:1_000_000]]}
    raise TypeError(f"cannot return a {type(v).__name__} across the sandbox boundary")


def _dec(v):
    if isinstance(v, list):
        return [_dec(x) for x in v]
    if isinstance(v, dict):
        (tag, x), = v.items()
        if tag == "$t":
            return tuple(_dec(y) for y in x)
        if tag == "$s":
            return {_dec(y) for y in x}
        if tag == "$fs":
            return frozenset(_dec(y) for y in x)
        if tag == "$d":
            return {_dec(k): _dec(y) for k, y in x}
        if tag == "$b":
            return base64.b64decode(x)
        if tag == "$c":
            return complex(_dec(x[0]), _dec(x[1]))
        if tag == "$f":
            return float(x)
        if tag == "$it":
            return iter([_dec(y) for y in x])
        raise ValueError(f"unknown tag {tag}")
    return v


def _send(msg):
    _rpc_out.write(json.dumps(msg, separators=(",", ":")).encode() + b"\n")


def _recv():
    line = _rpc_in.readline()
    if not line:
        os._exit(0)
    return json.loads(line)


def _answer(fn):
    try:
        _send({"value": _enc(fn())})
    except BaseException as e:  # noqa: BLE001 - any failure of the solution is an answer
        _send({"raise": type(e).__name__, "msg": str(e)[:500]})


_program = _recv()["program"]
_g = {"__name__": "__solution__", "__builtins__": __builtins__}
try:
    exec(compile(_program, "solution.py", "exec"), _g)
except BaseException as e:  # noqa: BLE001
    _send({"ok": False, "raise": type(e).__name__, "msg": str(e)[:500]})
    os._exit(0)
_send({"ok": True, "names": {k: ("call" if callable(v) else "data") for k, v in _g.items()
                             if not k.startswith("__") and not isinstance(v, types.ModuleType)}})
while True:
    _req = _recv()
    if "call" in _req:
        _f = _g.get(_req["call"])
        _a = [_dec(x) for x in _req["args"]]
        _k = {k: _dec(x) for k, x in _req["kwargs"]}
        _answer(lambda: _f(*_a, **_k))
    else:
        _answer(lambda: _g[_req["get"]])
