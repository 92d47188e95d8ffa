"""reasoning-gym: every procedural dataset as a domain (source.py, build.py), its scorers' credit decisions
(scorers.py; the audit behind `posttrain tasks audit-scorers` in audit.py), the `reasoning_gym` verifier,
training-mixture sources (mixture.py) and preference pairs (pairs.py, `pref:gym_DOMAIN`).

Registered by name only: nothing here imports reasoning_gym until a domain is used.
"""

from posttrain.tasks.preferences import FAMILIES as PAIR_FAMILIES
from posttrain.tasks.registry import FAMILIES, register_group
from posttrain.verifiers.registry import register

register_group("reasoning_gym", "posttrain.domains.reasoning_gym.source:list_domains",
               description="every reasoning-gym domain (procedural, verified by its own scorer)",
               member_uses=("rl", "sft", "eval", "pref"))
FAMILIES.register("reasoning_gym", "posttrain.domains.reasoning_gym.mixture:GymSource")
PAIR_FAMILIES.register("gym", "posttrain.domains.reasoning_gym.pairs:gym_pairs")
register("reasoning_gym", "posttrain.domains.reasoning_gym.source:verify")
