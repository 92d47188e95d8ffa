"""humaneval."""
