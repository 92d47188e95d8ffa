"""redteam."""
