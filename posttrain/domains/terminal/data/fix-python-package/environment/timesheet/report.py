"""Totals per person and the printed report."""


def totals(shifts):
    per_person = {}
    for shift in shifts:
        per_person[shift.name] = per_person.get(shift.name, 0) + shift.minutes
    return per_person


def hours(minutes):
    """Minutes -> 'H:MM'."""
    return f"{minutes // 60}:{minutes % 60:02d}"


def render(shifts):
    per_person = totals(shifts)
    lines = [f"{name} {hours(per_person[name])}" for name in sorted(per_person)]
    lines.append(f"TOTAL {hours(sum(per_person.values()))}")
    return "\n".join(lines) + "\n"
