"""The document environment (being written for issue 16)."""
