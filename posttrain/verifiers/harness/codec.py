"""The value codec both sandbox programs use (prepended to each program's source by
harness/__init__.py): plain JSON plus one-key tags for tuple ($t), set ($s), frozenset ($fs),
dict with any keys ($d), bytes ($b), complex ($c), non-finite floats ($f) and iterators ($it).

`_enc` is lenient (subclasses of builtins become their base type; generators, map, zip, range
and the like are drained, a million items at most). `_dec` is strict: anything but the shapes
above is an error, and what it returns are fresh builtin objects, so nothing the solution
defines (a rigged `__eq__`, a custom class) ever reaches the judge.
"""

import base64
import math
import types

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
    if isinstance(v, (set, frozenset)):
        return {"$fs" if isinstance(v, frozenset) else "$s": [_enc(x, depth + 1) for x in v]}
    if isinstance(v, dict):
        return {"$d": [[_enc(k, depth + 1), _enc(x, depth + 1)] for k, x in v.items()]}
    if isinstance(v, (bytes, bytearray)):
        return {"$b": base64.b64encode(bytes(v)).decode()}
    if isinstance(v, complex):
        return {"$c": [_enc(v.real), _enc(v.imag)]}
    if isinstance(v, _ITERATORS):
        return {"$it": [_enc(x, depth + 1) for x in list(v)[:1_000_000]]}
    raise TypeError(f"cannot send a {type(v).__name__} across the sandbox boundary")


def _dec(v, depth=0):
    """Plain data -> fresh builtin objects (strict: anything else is an error)."""
    if depth > 200:
        raise ValueError("value nested too deeply")
    if v is None or type(v) in (bool, int, float, str):
        return v
    if type(v) is list:
        return [_dec(x, depth + 1) for x in v]
    if type(v) is dict and len(v) == 1:
        (tag, x), = v.items()
        if tag == "$t" and type(x) is list:
            return tuple(_dec(y, depth + 1) for y in x)
        if tag in ("$s", "$fs") and type(x) is list:
            items = [_dec(y, depth + 1) for y in x]
            return set(items) if tag == "$s" else frozenset(items)
        if tag == "$d" and type(x) is list:
            return {_dec(p[0], depth + 1): _dec(p[1], depth + 1) for p in x if type(p) is list and len(p) == 2}
        if tag == "$b" and type(x) is str:
            return base64.b64decode(x, validate=True)
        if tag == "$c" and type(x) is list and len(x) == 2:
            return complex(float(_dec(x[0])), float(_dec(x[1])))
        if tag == "$f" and x in ("nan", "inf", "-inf"):
            return float(x)
        if tag == "$it" and type(x) is list:
            return iter([_dec(y, depth + 1) for y in x])
    raise ValueError(f"malformed value: {str(v)[:80]}")
