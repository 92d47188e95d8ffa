"""One registry: names -> objects, or -> "package.module:attr" strings resolved on first use.

    VERIFIERS = Registry("verifier", {"exact": "posttrain.verifiers.basic:exact"})
    VERIFIERS.register("needle", "posttrain.domains.longctx.needle:needle")   # by name: nothing imported
    VERIFIERS.register("mine")(fn)                                          # or as a decorator
    VERIFIERS.get("exact")            # imports posttrain.verifiers.basic once, returns the function
    VERIFIERS.get("exactt")           # KeyError-like ConfigError: one line with "did you mean exact?"

A lower layer keeps a registry and never imports what registers into it: a domain package
(posttrain/domains/<name>/__init__.py) registers its parts by name when `posttrain.domains` loads
them; a lookup of a name nobody registered says so in one line, and says that the domains were not
loaded when they were not.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import MutableMapping
from typing import Any, Iterator

from posttrain.core.errors import ConfigError

_state = {"domains_loaded": False}


def mark_domains_loaded() -> None:
    """Called once the domain packages have registered themselves (posttrain.domains.load_domains)."""
    _state["domains_loaded"] = True


def domains_loaded() -> bool:
    return _state["domains_loaded"]


def resolve(ref: str) -> Any:
    """The object a "package.module:attr" string names."""
    module, sep, attr = ref.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"{ref!r} is not a 'package.module:attr' name")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


class Registry(MutableMapping):
    """A table of named objects of one kind. Values are objects or lazy "module:attr" strings; reading
    an entry resolves (and caches) it. Registering a different object under a taken name is an error
    (`reg[name] = obj` replaces, for tests)."""

    def __init__(self, kind: str, builtins: dict[str, Any] | None = None,
                 error: type[Exception] = ConfigError) -> None:
        self.kind = kind
        self.error = error
        self._entries: dict[str, Any] = dict(builtins or {})
        self._builtin = set(self._entries)

    def register(self, name: str, obj: Any = None) -> Any:
        """register(name, obj_or_"module:attr"); register(name) alone returns a decorator."""
        if obj is None:
            def deco(fn: Any) -> Any:
                self.register(name, fn)
                return fn
            return deco
        old = self._entries.get(name)
        same = old is None or old is obj or (isinstance(old, str) and isinstance(obj, str) and old == obj)
        if not same and not (isinstance(old, str) and self._resolved(name) is obj):
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = obj
        return obj

    def _resolved(self, name: str) -> Any:
        value = self._entries[name]
        if isinstance(value, str):
            value = resolve(value)
            self._entries[name] = value
        return value

    def get(self, name: str, default: Any = ...) -> Any:  # type: ignore[override]
        if name in self._entries:
            return self._resolved(name)
        if default is not ...:
            return default
        raise self.error(self.missing(name))

    def missing(self, name: str) -> str:
        """One line: `name` is unknown, the close names, and a hint when the domains were never loaded."""
        close = difflib.get_close_matches(name, list(self._entries), n=3, cutoff=0.6)
        line = f"unknown {self.kind} {name!r}"
        line += f" (did you mean {', '.join(close)}?)" if close else ""
        if not domains_loaded():
            line += "; posttrain.domains was not loaded (import posttrain.domains; load_domains())"
        return line + f"; known: {', '.join(sorted(self._entries))}"

    def names(self) -> list[str]:
        return sorted(self._entries)

    def contains(self, name: str) -> bool:
        return name in self._entries

    def provided(self) -> list[str]:
        """Names registered beyond the builtins (by domains, plugins, tests)."""
        return sorted(set(self._entries) - self._builtin)

    # Mapping protocol: `name in reg`, `reg[name]`, iteration over names, `reg[name] = obj`, `reg.pop(name)`
    def __getitem__(self, name: str) -> Any:
        if name not in self._entries:
            raise KeyError(name)
        return self._resolved(name)

    def __setitem__(self, name: str, obj: Any) -> None:
        self._entries[name] = obj

    def __delitem__(self, name: str) -> None:
        del self._entries[name]
        self._builtin.discard(name)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {len(self)} names)"

