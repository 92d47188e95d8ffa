"""The house's rules, read from the source (docs/architecture.md, "Layers"):

- no import circle among posttrain's modules (module-level and function-level imports alike, and
  `import_module("posttrain....")` / `"posttrain.x.y:attr"` strings this scan can resolve);
- a module imports only from its own layer or below; a lower layer finds a higher one's parts by
  registered name, never by import;
- a few "never" rules inside a layer (envs and verifiers never import each other);
- no module over 500 lines, no folder named like build output.

Run `python tests/test_layers.py` for the whole report (cycles, upward imports, largest files).
"""

from __future__ import annotations

import ast
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "posttrain"

# package (first component under posttrain/, or a top-level module) -> layer
LAYERS = {
    "core": 0,
    "config": 1, "algos": 1, "sandbox": 1, "checkpoint": 1,
    "engine": 2,
    "envs": 3, "verifiers": 3,
    "tasks": 4,
    "domains": 5,
    "train": 6,
    "rl": 7, "eval": 7, "telemetry": 7, "scale": 7, "models": 7,
    "recipes": 8,
    "cli": 9,
}
# pairs on one layer that must not import each other (a -> b forbidden)
NEVER = [("envs", "verifiers"), ("verifiers", "envs")]
# packages held to a narrower set than their layer allows
ONLY = {
    "train": {"core", "config", "algos", "train"},   # the trainer side never imports tasks, envs, engines
    "checkpoint": {"core"},                           # a base service
    "core": {"core"},
}
MAX_LINES = 500
STRING_MODULE = re.compile(r"""["'](posttrain(?:\.[A-Za-z_]\w*)+)(?::[A-Za-z_]\w*)?["']""")


def modules() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*.py"):
        rel = p.relative_to(ROOT)
        if "data" in rel.parts[:-1] and "domains" in rel.parts:  # shipped task folders are data, not code
            continue
        if "harness" in rel.parts:  # standalone scripts copied into sandboxes, never imported
            continue
        name = ".".join(rel.with_suffix("").parts)
        out[name.removesuffix(".__init__")] = p
    return out


def _resolve(name: str, mods: dict[str, Path]) -> str | None:
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def edges(mods: dict[str, Path]) -> dict[str, list[tuple[str, int]]]:
    """module -> [(imported module, line)], every import anywhere in the file, plus resolvable
    module strings (import_module arguments, "module:attr" registrations)."""
    out: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for mod, path in mods.items():
        text = path.read_text()
        tree = ast.parse(text)
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    parts = parts[: len(parts) - (node.level - 1)]
                    base = ".".join(parts + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                m = STRING_MODULE.fullmatch(repr(node.value)) or STRING_MODULE.fullmatch(f'"{node.value}"')
                if m:
                    targets = [m.group(1)]
            for t in targets:
                if not t.startswith("posttrain"):
                    continue
                r = _resolve(t, mods)
                if r and r != mod:
                    out[mod].append((r, node.lineno))
    return out


def package_of(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else "posttrain"


def cycles(graph: dict[str, list[tuple[str, int]]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on, stack, out = set(), [], []
    counter = [0]
    nodes = set(graph) | {t for v in graph.values() for t, _ in v}

    def strong(v: str) -> None:
        work = [(v, iter(sorted({t for t, _ in graph.get(v, [])})))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted({t for t, _ in graph.get(nxt, [])}))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            strong(v)
    return out


def upward(graph: dict[str, list[tuple[str, int]]], mods: dict[str, Path]) -> list[str]:
    bad = []
    for mod, targets in sorted(graph.items()):
        a = package_of(mod)
        for t, line in targets:
            b = package_of(t)
            if a == "posttrain" or b == "posttrain":
                continue
            la, lb = LAYERS.get(a), LAYERS.get(b)
            where = f"{mods[mod].relative_to(ROOT)}:{line}"
            if la is None or lb is None:
                bad.append(f"{where}: {mod} -> {t}: package without a layer (add it to LAYERS)")
            elif lb > la:
                bad.append(f"{where}: {mod} (L{la} {a}) imports {t} (L{lb} {b})")
            elif a in ONLY and b not in ONLY[a]:
                bad.append(f"{where}: {mod} ({a}) may import only {sorted(ONLY[a])}, not {t}")
            elif (a, b) in NEVER:
                bad.append(f"{where}: {mod} ({a}) must not import {t} ({b})")
    return bad


def test_no_import_cycles():
    mods = modules()
    found = cycles(edges(mods))
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_imports_only_run_downward():
    mods = modules()
    bad = upward(edges(mods), mods)
    assert not bad, f"{len(bad)} imports run upward:\n" + "\n".join(bad)


def test_no_module_over_the_size_limit_and_no_build_looking_folders():
    mods = modules()
    big = sorted((len(p.read_text().splitlines()), str(p.relative_to(ROOT))) for p in mods.values())
    over = [f"{name}: {n} lines" for n, name in big if n > MAX_LINES]
    assert not over, f"modules over {MAX_LINES} lines:\n" + "\n".join(over)
    for bad in ("dist", "build"):
        assert not (PKG / bad).exists(), f"posttrain/{bad}/ reads as build output: rename it"


def test_the_scan_sees_lazy_and_string_imports(tmp_path):
    """The scan itself: a function-level import and a "module:attr" string both count as edges."""
    mods = modules()
    graph = edges(mods)
    assert any(t == "posttrain.core.errors" for t, _ in graph["posttrain.cli"])
    lazy = [(m, t) for m, ts in graph.items() for t, line in ts
            if m.startswith("posttrain.recipes") and t.startswith("posttrain.recipes")]
    assert lazy, "recipes import each other somewhere (pipeline dispatch): the scan must see it"


if __name__ == "__main__":
    mods = modules()
    graph = edges(mods)
    cyc = cycles(graph)
    up = upward(graph, mods)
    print(f"modules {len(mods)}; cycles {len(cyc)}; upward imports {len(up)}")
    for c in cyc:
        print("cycle:", " <-> ".join(c))
    for line in up:
        print("up:", line)
    sizes = sorted(((len(p.read_text().splitlines()), str(p.relative_to(ROOT))) for p in mods.values()), reverse=True)
    print("largest:", ", ".join(f"{n} {name}" for n, name in sizes[:8]))
    sys.exit(1 if cyc or up else 0)
