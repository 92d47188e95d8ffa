"""Family `traceback`: a Python report script with seeded bugs, each of which raises.

The script reads `LABEL VALUE` lines and prints, per label (sorted), its count, sum and maximum, then a
grand-total line. Level 1: one bug; level 2: two (the second shows only once the first is fixed);
level 3: three, in the script and in its helper module. Each bug is a one-line change that raises for
any input (ModuleNotFoundError, IndexError, TypeError, KeyError, NameError, AttributeError).

The tests run the agent's script on the shipped file and on seeded generated files and compare its
output with the correct script's (tests/reference/); the oracle's steps each undo one bug.
"""

from __future__ import annotations

import random

from posttrain.domains.terminal.generate.common import NOUNS, TEST_HEAD, WORDS, GenTask, replace_step

HELPERS = '''def parse_line(line):
    label, value = line.split()
    return label, int(value)


def fmt_row(row):
    return f"{row['label']}: n={row['count']} sum={row['total']} max={row['peak']}"
'''

MAIN = '''import sys
from collections import defaultdict

{helpers_import}

def {load}(path):
    groups = defaultdict(list)
    with open(path) as f:
        for line in f:
            if line.strip():
                label, value = parse_line(line)
                groups[label].append(value)
    return groups


def {summarise}(groups):
    rows = []
    for label in sorted(groups):
        values = groups[label]
        total = 0
        for i in range(len(values)):
            total += values[i]
        rows.append({{"label": label, "count": len(values), "total": total, "peak": max(values)}})
    return rows


def main(argv):
    rows = {summarise}({load}(argv[1]))
    for row in rows:
        print(fmt_row(row))
    grand = sum(row["total"] for row in rows)
    print("{total_word}: " + str(grand))


if __name__ == "__main__":
    main(sys.argv)
'''

# bug -> (in the helpers?, correct text, buggy text); bugs sharing a correct text exclude each other
BUGS = {
    "import": (False, "from collections import defaultdict", "from collection import defaultdict"),
    "range": (False, "range(len(values))", "range(len(values) + 1)"),
    "concat": (False, ': " + str(grand)', ': " + grand'),
    "int": (True, "return label, int(value)", "return label, value"),
    "key": (True, "{row['label']}", "{row['Label']}"),
    "name": (False, "groups[label].append(value)", "groups[lable].append(value)"),
    "attr": (False, "groups[label].append(value)", "groups[label].push(value)"),
    "arity": (False, "print(fmt_row(row))", "print(fmt_row(row, True))"),
}

GEN_DATA = '''

def generated_file(rng):
    labels = rng.sample(LABELS, rng.randint(1, len(LABELS)))
    return "".join(f"{rng.choice(labels)} {rng.randint(-20, 200)}\\n" for _ in range(rng.randint(1, 40)))
'''


def expected_output(lines: list[tuple[str, int]], total_word: str) -> str:
    groups: dict[str, list[int]] = {}
    for label, value in lines:
        groups.setdefault(label, []).append(value)
    out = [f"{k}: n={len(v)} sum={sum(v)} max={max(v)}" for k, v in sorted(groups.items())]
    out.append(f"{total_word}: {sum(sum(v) for v in groups.values())}")
    return "\n".join(out) + "\n"


def make(level: int, seed: int, rng: random.Random) -> GenTask:
    a, b = rng.sample(WORDS, 2)
    script, helper = f"{a}_report.py", f"{b}_util"
    load, summarise = rng.choice(("load", "read_groups", "collect")), rng.choice(("summarise", "tabulate", "rollup"))
    total_word = rng.choice(("TOTAL", "Grand total", "All", "Sum"))
    noun = rng.choice(NOUNS)
    data_name = f"{noun}.txt"
    split = level == 3  # the helpers live in their own module
    helpers_import = f"from {helper} import fmt_row, parse_line\n" if split else "\n" + HELPERS
    main = MAIN.format(helpers_import=helpers_import, load=load, summarise=summarise, total_word=total_word)
    files = {script: main, **({f"{helper}.py": HELPERS} if split else {})}
    names = sorted(BUGS)
    rng.shuffle(names)
    chosen: list[str] = []
    if split:  # at least one bug in the helper module
        chosen.append(rng.choice(["int", "key"]))
    for bug in names:
        taken = {BUGS[c][1] for c in chosen}
        if len(chosen) < level and bug not in chosen and BUGS[bug][1] not in taken:
            chosen.append(bug)
    broken, steps = dict(files), []
    for bug in chosen:
        in_helper, good, bad = BUGS[bug]
        path = f"{helper}.py" if split and in_helper else script
        assert broken[path].count(good) == 1, (bug, path)
        broken[path] = broken[path].replace(good, bad)
        steps.append(replace_step(path, bad, good))
    labels = rng.sample(WORDS, rng.randint(3, 5))
    lines = [(rng.choice(labels), rng.randint(0, 99)) for _ in range(rng.randint(8, 14 + 4 * level))]
    data = "".join(f"{k} {v}\n" for k, v in lines)
    where = f"`{script}` (and its helper module `{helper}.py`)" if split else f"`{script}`"
    instruction = (
        f"{where} in the current directory summarise{'s' if not split else ''} a file of {noun}: each line is a "
        f"label and an integer, separated by a space. `python3 {script} {data_name}` should print one line per "
        f"label, sorted by label, `LABEL: n=COUNT sum=SUM max=MAX`, and a last line `{total_word}: SUM` with the "
        f"sum over all lines. For the shipped `{data_name}` that is:\n\n"
        + "".join(f"    {line}\n" for line in expected_output(lines, total_word).splitlines())
        + f"\nRight now `python3 {script} {data_name}` crashes with a traceback. Fix the code so that it prints "
        f"that report for any such file (also negative numbers). Keep the file names.\n")
    run_ref = (f"[PY, str(HERE / 'reference' / {script!r}), str(path)]")
    test = TEST_HEAD + f"\nSCRIPT = {script!r}\nLABELS = {labels + [w + 'x' for w in labels[:2]]!r}\n" + GEN_DATA + f'''

def report(script_dir, path):
    out = run([PY, str(script_dir / SCRIPT), str(path)])
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_shipped_file():
    want = run({run_ref.replace("str(path)", f"str(WORK / {data_name!r})")}).stdout
    assert report(WORK, WORK / {data_name!r}) == want


def test_generated_files(tmp_path):
    rng = random.Random({seed % 100_000})
    for n in range(6):
        path = tmp_path / f"case{{n}}.txt"
        path.write_text(generated_file(rng))
        want = run({run_ref}).stdout
        assert report(WORK, path) == want, path.read_text()
'''
    tests = {"test_script.py": test, **{f"reference/{p}": t for p, t in files.items()}}
    return GenTask(name=f"traceback-l{level}-s{seed}", instruction=instruction, environment={**broken, data_name: data},
                   tests=tests, steps=steps, category="debugging", tags=["python", "traceback", *chosen], level=level)
