#!/bin/bash
# median() returns the upper middle value for an even count; it must average the two middle values.
set -e
python3 - <<'PY'
from pathlib import Path
p = Path("stats.py")
src = p.read_text()
old = "    return ordered[middle]\n"
new = ("    if len(ordered) % 2 == 1:\n"
       "        return ordered[middle]\n"
       "    return (ordered[middle - 1] + ordered[middle]) / 2\n")
assert src.count(old) == 1
p.write_text(src.replace(old, new))
PY
python3 -m unittest discover -s tests
