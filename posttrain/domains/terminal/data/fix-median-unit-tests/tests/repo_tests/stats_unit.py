import unittest

from stats import mean, median, spread


class StatsTest(unittest.TestCase):
    def test_mean(self):
        self.assertEqual(mean([1, 2, 3, 4]), 2.5)

    def test_median_odd(self):
        self.assertEqual(median([7, 1, 3]), 3)

    def test_median_even(self):
        self.assertEqual(median([4, 1, 3, 2]), 2.5)

    def test_spread(self):
        self.assertEqual(spread([5, -2, 9]), 11)

    def test_empty(self):
        for func in (mean, median, spread):
            with self.assertRaises(ValueError):
                func([])


if __name__ == "__main__":
    unittest.main()
