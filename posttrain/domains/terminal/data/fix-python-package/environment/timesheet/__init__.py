"""timesheet: total the hours worked per person from a CSV of shifts (python3 -m timesheet FILE)."""
