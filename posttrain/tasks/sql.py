"""The sql task source (being written for issue 16)."""
