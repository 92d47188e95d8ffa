import os
import tempfile
import unittest

from timesheet.parse import read_shifts

SHEET = "name,date,start,end\nann,2026-01-01,08:00,12:00\nben,2026-01-01,13:00,15:30\n"


class ParseTest(unittest.TestCase):
    def test_reads_every_shift(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "sheet.csv")
            with open(path, "w") as f:
                f.write(SHEET)
            shifts = read_shifts(path)
        self.assertEqual([(s.name, s.minutes) for s in shifts], [("ann", 240), ("ben", 150)])
