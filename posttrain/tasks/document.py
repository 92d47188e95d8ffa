"""The document task source (being written for issue 16)."""
