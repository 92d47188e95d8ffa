"""The cad task source (being written for issue 16)."""
