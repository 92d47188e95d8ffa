"""bfcl."""
