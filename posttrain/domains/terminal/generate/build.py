"""Family `build`: a small C program whose Makefile has seeded faults; `make` must build `./TOOL`.

The program (src/main.c, src/OPS.c, include/OPS.h) prints one line per function for its two integer
arguments; the functions are drawn from a pool. Level 1: one Makefile fault; level 2: two; level 3:
three. Faults: a recipe indented with spaces, a misspelt source path, the include directory missing from
CFLAGS, the math library missing from LDLIBS (the program then calls sqrt), a wrong program name.

The tests check the C sources are unchanged, build from a clean copy of /work (sources and Makefile
only) with `make`, and run `./TOOL` on seeded argument pairs against the Python reference; the oracle's
steps each fix one fault.
"""

from __future__ import annotations

import math
import random

from posttrain.domains.terminal.generate.common import TEST_HEAD, WORDS, GenTask, replace_step, unchanged_test

# name -> (C body over long a, long b; Python expression over a, b); arguments are in 1..10**4
FUNCS = {
    "gcd": ("while (b) { long t = a % b; a = b; b = t; }\n    return a;", "math.gcd(a, b)"),
    "span_sum": ("long lo = a < b ? a : b, hi = a < b ? b : a;\n    return (lo + hi) * (hi - lo + 1) / 2;",
                 "(min(a, b) + max(a, b)) * (abs(a - b) + 1) // 2"),
    "digit_sum": ("long s = 0;\n    for (long x = a * b; x; x /= 10) s += x % 10;\n    return s;",
                  "sum(map(int, str(a * b)))"),
    "mod_pow": ("long r = 1, base = a % 1000;\n    for (long e = b % 50; e; e--) r = r * base % 1000;\n    return r;",
                "pow(a % 1000, b % 50, 1000)"),
    "xor_mix": ("return (a ^ b) + (a & b) * 3;", "(a ^ b) + (a & b) * 3"),
}
HYPOT = ("hypot_floor", "return (long) sqrt((double) (a * a + b * b));", "math.isqrt(a * a + b * b)")

FAULTS = ("spaces", "path", "include", "libm", "target")

GEN_ARGS = '''

def argument_pairs(rng):
    return [(rng.randint(1, 10 ** 4), rng.randint(1, 10 ** 4)) for _ in range(12)] + [(1, 1), (9999, 3)]
'''


def make(level: int, seed: int, rng: random.Random) -> GenTask:
    tool = f"{rng.choice(WORDS)}calc"
    ops = rng.choice(("ops", "mathx", "arith", "calcs"))
    faults = rng.sample(FAULTS, level)
    names = rng.sample(sorted(FUNCS), 2)
    funcs = {n: FUNCS[n] for n in names}
    if "libm" in faults:
        funcs[HYPOT[0]] = HYPOT[1:]
    header = f"#ifndef {ops.upper()}_H\n#define {ops.upper()}_H\n\n" + "".join(
        f"long {n}(long a, long b);\n" for n in funcs) + "\n#endif\n"
    includes = "#include <math.h>\n" if "libm" in faults else ""
    ops_c = f'#include "{ops}.h"\n{includes}\n' + "\n".join(
        f"long {n}(long a, long b)\n{{\n    {body}\n}}\n" for n, (body, _py) in funcs.items())
    main_c = (f'#include <stdio.h>\n#include <stdlib.h>\n\n#include "{ops}.h"\n\n'
              "int main(int argc, char **argv)\n{\n    if (argc != 3) {\n"
              f'        fprintf(stderr, "usage: {tool} A B\\n");\n        return 2;\n    }}\n'
              "    long a = atol(argv[1]), b = atol(argv[2]);\n"
              + "".join(f'    printf("{n} %ld\\n", {n}(a, b));\n' for n in funcs) + "    return 0;\n}\n")
    good_make = (f"CC = gcc\nCFLAGS = -O1 -Wall -Iinclude\nLDLIBS = {'-lm' if 'libm' in faults else ''}\n"
                 f"TARGET = {tool}\nSRCS = src/main.c src/{ops}.c\n\n"
                 "$(TARGET): $(SRCS) include/" + ops + ".h\n\t$(CC) $(CFLAGS) -o $@ $(SRCS) $(LDLIBS)\n\n"
                 "clean:\n\trm -f $(TARGET)\n\n.PHONY: clean\n")
    bad_make, steps = good_make, []
    edits = {
        "spaces": ("\t$(CC)", "    $(CC)"),
        "path": (f"src/{ops}.c\n", f"src/{ops}s.c\n"),
        "include": ("-O1 -Wall -Iinclude", "-O1 -Wall"),
        "libm": ("LDLIBS = -lm", "LDLIBS ="),
        "target": (f"TARGET = {tool}\n", f"TARGET = {tool}.bin\n"),
    }
    for fault in faults:
        good, bad = edits[fault]
        assert bad_make.count(good) == 1, fault
        bad_make = bad_make.replace(good, bad)
        steps.append(replace_step("Makefile", bad, good))
    sources = {"src/main.c": main_c, f"src/{ops}.c": ops_c, f"include/{ops}.h": header}
    env = {**sources, "Makefile": bad_make}
    py = "\n".join(f"    out.append(f'{n} {{{expr}}}')" for n, (_b, expr) in funcs.items())
    test = TEST_HEAD + "import math\n" + unchanged_test(sources) + GEN_ARGS + f'''

TOOL = {tool!r}
FILES = {sorted(env)!r}


def expected(a, b):
    out = []
{py}
    return "\\n".join(out) + "\\n"


def test_builds_from_a_clean_copy_and_computes(tmp_path):
    for rel in FILES:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(WORK / rel, tmp_path / rel)
    build = run(["make"], cwd=tmp_path, timeout=60)
    assert build.returncode == 0, (build.stdout + build.stderr)[-2000:]
    assert (tmp_path / TOOL).is_file(), f"make did not build ./{{TOOL}}"
    rng = random.Random({seed % 100_000})
    for a, b in argument_pairs(rng):
        out = run([str(tmp_path / TOOL), str(a), str(b)], cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        assert out.stdout == expected(a, b), (a, b)
'''
    example = "".join(f"    {line}\n" for line in _expected(funcs, 12, 30).splitlines())
    instruction = (f"The C program in the current directory (`src/`, `include/`, `Makefile`) should build with "
                   f"`make` into the executable `./{tool}`, which prints one line per function for two positive "
                   f"integers, for example `./{tool} 12 30` prints:\n\n{example}\n"
                   f"Right now `make` does not build it. Fix the build (the Makefile) so that `make` in a clean copy "
                   f"of this directory builds `./{tool}`. Do not change the C sources or the header.\n")
    return GenTask(name=f"build-l{level}-s{seed}", instruction=instruction, environment=env,
                   tests={"test_build.py": test}, steps=steps, category="build",
                   tags=["c", "make", *faults], level=level)


def _expected(funcs: dict, a: int, b: int) -> str:
    return "".join(f"{n} {eval(expr, {'math': math, 'a': a, 'b': b})}\n" for n, (_b, expr) in funcs.items())
