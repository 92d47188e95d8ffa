import subprocess
import sys
import unittest


class ReportTest(unittest.TestCase):
    def test_sample_report(self):
        out = subprocess.run([sys.executable, "-m", "timesheet", "sample.csv"], capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout, "alice 12:35\nbob 12:15\ncarol 8:00\nTOTAL 32:50\n")
