"""Family `unittest`: make a small module's failing unit tests pass (implement a stub, fix wrong functions).

The module holds level + 1 functions drawn from a pool; level 1: one is a stub (`raise
NotImplementedError`); level 2: a stub and a wrong implementation; level 3: a stub and two wrong ones.
The workspace has the module's unittest file (`python3 -m unittest`; pytest is not in the episode's
sandbox). The tests run our copy of those unit tests and compare every function with the reference on
seeded generated inputs, in subprocesses; the oracle's steps each replace one function by the reference.
"""

from __future__ import annotations

import random

from posttrain.domains.terminal.generate.common import TEST_HEAD, WORDS, GenTask, replace_step

# name -> (signature, docstring, reference body, wrong body, unit cases [(args, expected)], random args source)
POOL = {
    "clamp": ("x, lo, hi", "Return x limited to the range lo..hi (lo <= hi).",
              "return max(lo, min(x, hi))", "return min(lo, max(x, hi))",
              [((5, 1, 9), 5), ((-3, 0, 4), 0), ((12, 0, 4), 4)],
              "(rng.randint(-50, 50), rng.randint(-20, 0), rng.randint(0, 20))"),
    "chunks": ("xs, n", "Split list xs into consecutive lists of n items; the last may be shorter.",
               "return [xs[i:i + n] for i in range(0, len(xs), n)]",
               "return [xs[i:i + n] for i in range(0, len(xs) - n, n)]",
               [(([1, 2, 3, 4, 5], 2), [[1, 2], [3, 4], [5]]), (([], 3), []), (([1, 2], 2), [[1, 2]])],
               "([rng.randint(0, 9) for _ in range(rng.randint(0, 12))], rng.randint(1, 4))"),
    "dedupe": ("xs", "Return the items of xs without repeats, in the order of their first appearance.",
               "seen = set()\n    out = []\n    for x in xs:\n        if x not in seen:\n            seen.add(x)\n"
               "            out.append(x)\n    return out",
               "return sorted(set(xs))",
               [(([3, 1, 3, 2, 1],), [3, 1, 2]), (([],), []), ((["b", "a", "b"],), ["b", "a"])],
               "([rng.randint(0, 6) for _ in range(rng.randint(0, 12))],)"),
    "rle": ("s", "Run-length encode string s as a list of [character, count] pairs.",
            "out = []\n    for ch in s:\n        if out and out[-1][0] == ch:\n            out[-1][1] += 1\n"
            "        else:\n            out.append([ch, 1])\n    return out",
            "out = []\n    for ch in s:\n        if out and out[-1][0] == ch:\n            out[-1][1] += 1\n"
            "        else:\n            out.append([ch, 0])\n    return out",
            [(("aaab",), [["a", 3], ["b", 1]]), (("",), []), (("abba",), [["a", 1], ["b", 2], ["a", 1]])],
            "(''.join(rng.choice('ab c') for _ in range(rng.randint(0, 12))),)"),
    "balanced": ("s", "True when the brackets ()[]{} in s are balanced and properly nested; other characters "
                      "are ignored.",
                 "pairs = {')': '(', ']': '[', '}': '{'}\n    stack = []\n    for ch in s:\n"
                 "        if ch in '([{':\n            stack.append(ch)\n        elif ch in pairs:\n"
                 "            if not stack or stack.pop() != pairs[ch]:\n                return False\n"
                 "    return not stack",
                 "return all(s.count(a) == s.count(b) for a, b in ('()', '[]', '{}'))",
                 [(("([]{})",), True), (("([)]",), False), (("((",), False), (("a(b)c",), True)],
                 "(''.join(rng.choice('()[]{}x') for _ in range(rng.randint(0, 10))),)"),
    "second_largest": ("xs", "The second largest distinct value of xs, or None when there is none.",
                       "values = sorted(set(xs))\n    return values[-2] if len(values) > 1 else None",
                       "values = sorted(xs)\n    return values[-2] if len(values) > 1 else None",
                       [(([4, 1, 4, 3],), 3), (([7],), None), (([2, 2],), None)],
                       "([rng.randint(-5, 5) for _ in range(rng.randint(0, 8))],)"),
    "moving_sum": ("xs, k", "Sums of every window of k consecutive items of xs (k >= 1), in order.",
                   "return [sum(xs[i:i + k]) for i in range(len(xs) - k + 1)]",
                   "return [sum(xs[i:i + k]) for i in range(len(xs) - k)]",
                   [(([1, 2, 3, 4], 2), [3, 5, 7]), (([5], 1), [5]), (([1, 2], 3), [])],
                   "([rng.randint(-9, 9) for _ in range(rng.randint(0, 10))], rng.randint(1, 4))"),
    "snake_case": ("name", "Convert a camelCase or PascalCase name to snake_case (an upper-case letter "
                           "starts a new word, except at the start).",
                   "out = ''\n    for i, ch in enumerate(name):\n        if ch.isupper() and i > 0:\n"
                   "            out += '_'\n        out += ch.lower()\n    return out",
                   "out = ''\n    for ch in name:\n        if ch.isupper():\n            out += '_'\n"
                   "        out += ch.lower()\n    return out",
                   [(("parseHttpLine",), "parse_http_line"), (("Name",), "name"), (("x",), "x")],
                   "(''.join(rng.choice('aBcDe') for _ in range(rng.randint(1, 9))),)"),
}

PROBE = '''
import json, sys
sys.path.insert(0, sys.argv[1])
import {module} as m
out = []
for name, args in json.load(sys.stdin):
    try:
        out.append(["ok", getattr(m, name)(*args)])
    except Exception as e:
        out.append(["raised", type(e).__name__])
print(json.dumps(out))
'''


def function_source(name: str, body: str) -> str:
    sig, doc = POOL[name][0], POOL[name][1]
    return f'def {name}({sig}):\n    """{doc}"""\n    {body}\n'


def make(level: int, seed: int, rng: random.Random) -> GenTask:
    module = f"{rng.choice(WORDS)}_{rng.choice(('tools', 'utils', 'lib', 'helpers'))}"
    names = rng.sample(sorted(POOL), level + 1)
    broken_kind = {names[0]: "stub", **{n: "wrong" for n in names[1:level]}}  # the last one stays correct
    good = {n: function_source(n, POOL[n][2]) for n in names}
    broken = {n: function_source(n, "raise NotImplementedError" if broken_kind.get(n) == "stub" else
                                 POOL[n][3] if n in broken_kind else POOL[n][2]) for n in names}
    header = f'"""Small helpers ({", ".join(names)})."""\n\n\n'
    source = header + "\n\n".join(broken[n] for n in names)
    reference = header + "\n\n".join(good[n] for n in names)
    cases = "".join(f"\n    def test_{n}_{i}(self):\n        self.assertEqual(m.{n}(*{args!r}), {want!r})\n"
                    for n in names for i, (args, want) in enumerate(POOL[n][4]))
    unit = f"import unittest\n\nimport {module} as m\n\n\nclass Test{module.title().replace('_', '')}(unittest.TestCase):" \
           f"{cases}\n\nif __name__ == '__main__':\n    unittest.main()\n"
    unit_name = f"test_{module}.py"
    steps = [replace_step(f"{module}.py", broken[n], good[n]) for n in names if n in broken_kind]
    which = ", ".join(f"`{n}`" for n in names if n in broken_kind)
    instruction = (f"`{module}.py` in the current directory is a small module, and `{unit_name}` its unit tests "
                   f"(run them with `python3 -m unittest {unit_name[:-3]}`). Some tests fail: "
                   f"{'the function ' if len(broken_kind) == 1 else 'the functions '}{which} "
                   f"{'is' if len(broken_kind) == 1 else 'are'} not implemented or wrong. Make every function do "
                   "what its docstring says, for all inputs, so that all the unit tests pass. Do not change the "
                   "unit tests.\n")
    probes = "\n".join(f"    ({n!r}, lambda rng: {POOL[n][5]})," for n in names)
    test = TEST_HEAD + f'''
MODULE = {module!r}
UNIT = {unit_name!r}
PROBE = {PROBE.format(module=module)!r}
GENERATORS = [
{probes}
]


def evaluate(where, calls):
    out = run([PY, "-c", PROBE, str(where)], stdin=json.dumps(calls))
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def test_unit_tests_pass():
    """Our copy of the unit tests (the workspace's copy may have been edited), run against /work."""
    out = run([PY, "-m", "unittest", "discover", "-s", str(HERE / "unit"), "-p", UNIT, "-t", str(HERE / "unit")],
              cwd=WORK, timeout=30)
    assert out.returncode == 0, out.stderr[-2000:]


def test_generated_inputs(tmp_path):
    rng = random.Random({seed % 100_000})
    calls = [[name, list(gen(rng))] for _ in range(25) for name, gen in GENERATORS]
    want = evaluate(HERE / "reference", calls)
    got = evaluate(WORK, calls)
    for call, w, g in zip(calls, want, got):
        assert g == w, (call, g, w)
'''
    tests = {"test_module.py": test, f"reference/{module}.py": reference, f"unit/{unit_name}": unit}
    return GenTask(name=f"unittest-l{level}-s{seed}", instruction=instruction,
                   environment={f"{module}.py": source, unit_name: unit}, tests=tests, steps=steps,
                   category="testing", tags=["python", "unittest", *names], level=level)
