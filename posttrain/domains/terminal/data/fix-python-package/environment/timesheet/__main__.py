import sys

from timesheet.parse import read_shifts
from timesheet.report import render

if len(sys.argv) != 2:
    sys.exit("usage: python3 -m timesheet FILE")
sys.stdout.write(render(read_shifts(sys.argv[1])))
