"""The UNTRUSTED side of the code verifier: runs in the sandbox, in its own process, started by
`judge.py` with `python3 -I -B -c <this source>`. Nothing it says is believed: it only answers
calls with plain data, which the judge decodes into fresh builtin objects.

Protocol on fds 0/1 (duplicated to private fds before the solution runs; the solution's own
stdin, stdout and stderr go to /dev/null): one JSON message per line.
    judge -> runner  {"program": SRC}                    runner -> {"ok": true, "names": {name: "call"|"data"}}
    judge -> runner  {"call": NAME, "args": [..], "kwargs": [[k, v], ..]}   -> {"value": V} | {"raise": CLS, "msg": S}
    judge -> runner  {"get": NAME}                        -> {"value": V} | {"raise": ...}
Values use codec.py (`_enc`, `_dec`), which precedes this source in the program.
"""

import json
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
