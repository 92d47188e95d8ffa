import unittest

from timesheet.clock import shift_minutes, to_minutes


class ClockTest(unittest.TestCase):
    def test_to_minutes(self):
        self.assertEqual(to_minutes("00:00"), 0)
        self.assertEqual(to_minutes("9:05"), 545)
        self.assertEqual(to_minutes("23:59"), 1439)

    def test_bad_time(self):
        with self.assertRaises(ValueError):
            to_minutes("24:00")

    def test_day_shift(self):
        self.assertEqual(shift_minutes(to_minutes("09:00"), to_minutes("17:30")), 510)

    def test_shift_until_midnight(self):
        self.assertEqual(shift_minutes(to_minutes("18:00"), to_minutes("00:00")), 360)
