"""Family `text`: file and text processing. Records in delimited files become output files.

Level 1: one file `data.csv` (comma, header line), one output. Level 2: another delimiter, comment and
blank lines to skip, two outputs. Level 3: several files under `logs/` (each with a header), rows whose
value is not an integer to skip, three outputs. Each output is one operation (count / sum / max per key,
top N items, distinct items of a key, rows at or over a threshold) with seeded columns, keys and values.

The tests compare each output with the expected text the generator computed (tests/expected/) and check
the inputs are unchanged; the oracle has one step per output, a python3 program that parses the inputs
by the rules the instruction states and computes that output.
"""

from __future__ import annotations

import random

from posttrain.domains.terminal.generate.common import (KEYS, NOUNS, TEST_HEAD, VALUES, WORDS, GenTask,
                                                        unchanged_test)

DELIMS = {",": "a comma", ";": "a semicolon", "|": "a vertical bar (`|`)", "\t": "a tab"}

# operation -> (instruction sentence, python source of `out` from `rows` [(key, item, value)])
OPS = {
    "count": ("one line per {key}, sorted by {key} name: the {key}, a space and the number of records of it",
              "c = {{}}\nfor k, i, v in rows:\n    c[k] = c.get(k, 0) + 1\n"
              "out = ''.join(f'{{k}} {{c[k]}}\\n' for k in sorted(c))"),
    "sum": ("one line per {key}, `{key},total` where total is the sum of {value} of its records; "
            "largest total first, equal totals by {key} name",
            "t = {{}}\nfor k, i, v in rows:\n    t[k] = t.get(k, 0) + v\n"
            "out = ''.join(f'{{k}},{{t[k]}}\\n' for k in sorted(t, key=lambda k: (-t[k], k)))"),
    "max": ("one line per {key}, sorted by {key} name: the {key}, a tab and the largest {value} of its records",
            "m = {{}}\nfor k, i, v in rows:\n    m[k] = max(m.get(k, v), v)\n"
            "out = ''.join(f'{{k}}\\t{{m[k]}}\\n' for k in sorted(m))"),
    "top": ("the {item} of the {n} records with the largest {value}, one per line, largest first "
            "(equal values: by {item} name)",
            "best = sorted(rows, key=lambda r: (-r[2], r[1]))[:{n}]\nout = ''.join(r[1] + '\\n' for r in best)"),
    "distinct": ("every distinct {item} of the records whose {key} is `{pick}`, sorted, one per line",
                 "out = ''.join(i + '\\n' for i in sorted({{i for k, i, v in rows if k == {pick!r}}}))"),
    "threshold": ("one line with the number of records whose {value} is at least {t}",
                  "out = f'{{sum(1 for k, i, v in rows if v >= {t})}}\\n'"),
}
OUTPUT_NAMES = {"count": "counts.txt", "sum": "totals.csv", "max": "maxima.tsv", "top": "top.txt",
                "distinct": "distinct.txt", "threshold": "threshold.txt"}


def _parse_source(files: list[str], delim: str, skip_bad: bool) -> str:
    bad = "        if not v.lstrip('-').isdigit():\n            continue\n" if skip_bad else ""
    return (f"rows = []\nfor path in {files!r}:\n    lines = open(path).read().splitlines()[1:]\n"
            "    for line in lines:\n        if not line.strip() or line.startswith('#'):\n            continue\n"
            f"        k, i, v = [f.strip() for f in line.split({delim!r})]\n{bad}"
            "        rows.append((k, i, int(v)))\n")


def _run(source: str, rows: list) -> str:
    scope: dict = {"rows": rows}
    exec(source, scope)  # our own generated source (the same text the oracle runs)
    return scope["out"]


def make(level: int, seed: int, rng: random.Random) -> GenTask:
    key, value = rng.choice(KEYS), rng.choice(VALUES)
    item = rng.choice(("item", "sku", "user", "code", "tag"))
    noun = rng.choice(NOUNS)
    delim = "," if level == 1 else rng.choice([";", "|", "\t", ","])
    keys = rng.sample(WORDS, rng.randint(3, 4 + level))
    items = sorted({f"{rng.choice(WORDS)[:3]}{rng.randint(10, 99)}" for _ in range(8 + 4 * level)})
    n_files = 1 if level < 3 else rng.randint(2, 4)
    files = ["data.csv"] if level < 3 else [f"logs/part-{j + 1}.log" for j in range(n_files)]
    header = delim.join((key, item, value))
    rows: list[tuple[str, str, int]] = []
    env: dict[str, str] = {}
    for path in files:
        lines = [header]
        for _ in range(rng.randint(12, 20) * level // n_files + 6):
            row = (rng.choice(keys), rng.choice(items), rng.randint(1, 60 * level))
            if level >= 2 and rng.random() < 0.12:
                lines.append(rng.choice(["", f"# {rng.choice(WORDS)} {rng.choice(WORDS)}", "#"]))
            if level == 3 and rng.random() < 0.1:
                lines.append(delim.join((row[0], row[1], rng.choice(["n/a", "-", "?", "x1"]))))
                continue
            lines.append(delim.join(map(str, row)))
            rows.append(row)
        env[path] = "\n".join(lines) + "\n"
    ops = rng.sample(sorted(OPS), level)
    params = {"key": key, "value": value, "item": item, "n": rng.randint(2, 5), "pick": rng.choice(keys),
              "t": rng.randint(10, 50 * level)}
    parse = _parse_source(files, delim, level == 3)
    outputs, steps, bullets = {}, [], []
    for op in ops:
        sentence, source = OPS[op]
        out_name = OUTPUT_NAMES[op]
        code = source.format(**params)
        outputs[out_name] = _run(code, rows)
        steps.append(f"python3 - <<'PYEOF'\n{parse}{code}\nopen({out_name!r}, 'w').write(out)\nPYEOF")
        bullets.append(f"- `{out_name}`: {sentence.format(**params)}.")
    where = ("`data.csv`" if level < 3 else
             f"the files `logs/part-1.log` ... `logs/part-{n_files}.log` (all of them together)")
    rules = [f"The fields are separated by {DELIMS[delim]}; the first line of each file is the header "
             f"`{header}`; {value} is an integer."]
    if level >= 2:
        rules.append("Skip blank lines and lines starting with `#`.")
    if level == 3:
        rules.append(f"Skip records whose {value} is not an integer.")
    where = where[0].upper() + where[1:]
    instruction = (f"{where} in the current directory hold{'s' if level < 3 else ''} {noun}, one record per line "
                   f"with the fields {key}, {item} and {value}. {' '.join(rules)}\n\n"
                   f"Write these files in the current directory (every line ends with a newline; leave the input "
                   f"files unchanged):\n\n" + "\n".join(bullets) + "\n")
    test = TEST_HEAD + unchanged_test(env) + (
        f"\n\nOUTPUTS = {sorted(outputs)!r}\n\n\ndef test_outputs():\n    for name in OUTPUTS:\n"
        "        path = WORK / name\n        assert path.is_file() and not path.is_symlink(), f'{name} is missing'\n"
        "        want = (HERE / 'expected' / name).read_text()\n"
        "        assert path.read_text() == want, f'{name} differs from the expected output'\n")
    tests = {"test_outputs.py": test, **{f"expected/{n}": t for n, t in outputs.items()}}
    return GenTask(name=f"text-l{level}-s{seed}", instruction=instruction, environment=env, tests=tests, steps=steps,
                   category="data", tags=["text", "csv", *ops], level=level)
