"""reasoning_gym."""
