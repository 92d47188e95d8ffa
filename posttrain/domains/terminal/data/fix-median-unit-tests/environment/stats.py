"""Small statistics helpers: mean, median and spread of a list of numbers."""


def mean(values):
    if not values:
        raise ValueError("mean of an empty list")
    return sum(values) / len(values)


def median(values):
    """The middle value of the sorted list; for an even count, the mean of the two middle ones."""
    if not values:
        raise ValueError("median of an empty list")
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle]


def spread(values):
    """Largest minus smallest value."""
    if not values:
        raise ValueError("spread of an empty list")
    return max(values) - min(values)
