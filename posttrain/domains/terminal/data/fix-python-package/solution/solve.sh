#!/bin/bash
# Two bugs, the second hidden by the first: parse.py drops the last line of the file (the sample's
# overnight shift), and clock.shift_minutes does not wrap shifts that end on the next day.
set -e
python3 - <<'PY'
from pathlib import Path

def patch(path, old, new):
    p = Path(path)
    src = p.read_text()
    assert src.count(old) == 1, (path, old)
    p.write_text(src.replace(old, new))

patch("timesheet/parse.py", "lines = text.splitlines()[1:-1]  # skip the header and the end of the file",
      "lines = text.splitlines()[1:]  # skip the header")
patch("timesheet/clock.py", "    return end - start\n",
      "    minutes = (end - start) % MINUTES_PER_DAY\n    return minutes if minutes > 0 else MINUTES_PER_DAY\n")
PY
python3 -m unittest discover -s tests
python3 -m timesheet sample.csv
