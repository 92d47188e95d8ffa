"""The sql environment (being written for issue 16)."""
