"""The episode loop and its environments. The generic environment registers here by name;
a domain's environments register from its package (posttrain/domains/<name>/__init__.py)."""

from posttrain.envs.env import register_env

register_env("single_turn", "posttrain.envs.single_turn:make")
