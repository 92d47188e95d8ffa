"""posttrain: post-training for open-weight language models (docs/architecture.md has the map)."""
