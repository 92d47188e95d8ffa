"""Read a timesheet CSV: a header line `name,date,start,end`, then one shift per line."""

from collections import namedtuple

from timesheet.clock import shift_minutes, to_minutes

Shift = namedtuple("Shift", "name date minutes")


def parse_line(line):
    name, date, start, end = [field.strip() for field in line.split(",")]
    return Shift(name, date, shift_minutes(to_minutes(start), to_minutes(end)))


def read_shifts(path):
    with open(path) as f:
        text = f.read()
    lines = text.splitlines()[1:-1]  # skip the header and the end of the file
    return [parse_line(line) for line in lines if line.strip()]
