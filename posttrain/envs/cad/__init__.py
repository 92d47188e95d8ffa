"""The cad environment (being written for issue 16)."""
