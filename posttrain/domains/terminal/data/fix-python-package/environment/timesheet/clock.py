"""Clock times as minutes since midnight, and the length of a shift."""

MINUTES_PER_DAY = 24 * 60


def to_minutes(text):
    """'HH:MM' (or 'H:MM') -> minutes since midnight."""
    hours, minutes = text.strip().split(":")
    hours, minutes = int(hours), int(minutes)
    if not (0 <= hours < 24 and 0 <= minutes < 60):
        raise ValueError(f"not a clock time: {text!r}")
    return hours * 60 + minutes


def shift_minutes(start, end):
    """Length in minutes of a shift from start to end (minutes since midnight).

    A shift that ends at or before its start time ends on the next day (e.g. 22:00 to 06:00).
    """
    return end - start
