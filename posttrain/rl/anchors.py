"""Anchors: the start model's own answers on prompts RL never trains, rehearsed every step.

    anchors = Anchors.build(cfg, engine, tokenizer, stop_ids, out_dir)   # step 0: the start model answers
    anchors = Anchors.load(out_dir, cfg)                                 # a resumed run reads them back
    groups = list(batch.kept) + anchors.for_step(step)                   # what the trainer gets

Why. RL on a few domains moves the policy everywhere, not only where it is rewarded: on
SmolLM2-135M, 10 GRPO steps on 2-term arithmetic taught it to restate every question ("The
Greatest Common Divisor of 331 and 774 is 774."), and its untrained gcd fell 17.5 points
(docs/LOG.md). A KL penalty cannot see this: it is measured on the trained prompts' samples only.
InstructGPT's PPO-ptx mixes pretraining gradients into RL for the same reason; with no pretraining
corpus at hand, the start model's own greedy answers on other domains' prompts are the data
(self-distillation): they say what the model did before RL where RL does not look.

How. At step 0 (before any update, so the engine holds the start weights) every prompt of
`anchor.tasks` (eval-spec items of held-out seeds from `anchor.seed`) is answered greedily with
the rollout's max_tokens; answers cut by the token cap are dropped unless `keep_truncated`. Each
step, `per_step` of them (drawn by (train.seed, step): a resumed run draws the same) join the
step's groups as anchor groups (`types.Group.anchor`), each trajectory's `reward` being the fixed
advantage `weight`. The trainer (train/step.py) trains them with the PPO loss against the start
model's logprobs: where the policy has drifted below the start model on an anchor's tokens (ratio
< 1) the gradient pulls it back at full strength; once it is 1 + clip_high above, the clip stops
the push, so anchors hold the policy near the start model's answers rather than sharpening them.
Their tokens join the step's token mean (they dilute the RL tokens' weight by their share).

Stored as `out_dir/anchors.pkl` (checked pickle, core/fsio.py), written once and read on resume:
a resumed run cannot regenerate them (its engine holds trained weights).
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Sequence

from posttrain.config.rl import AnchorConfig
from posttrain.core.errors import CheckpointError
from posttrain.core.fsio import read_checked_pickle, write_checked_pickle
from posttrain.core.types import Group, SamplingParams
from posttrain.envs.rollout import rollout

FILE = "anchors.pkl"
FORMAT = 1


def anchor_tasks(cfg: AnchorConfig):
    """The anchor prompts' tasks (held-out seeds from `cfg.seed`)."""
    from posttrain.eval.sources import load_spec

    return load_spec(cfg.tasks, cfg.prompts, cfg.seed)


class Anchors:
    def __init__(self, cfg: AnchorConfig, groups: Sequence[Group], seed: int):
        self.cfg, self.groups, self.seed = cfg, list(groups), seed

    @classmethod
    def build(cls, cfg: AnchorConfig, engine, tokenizer, stop_ids: Sequence[int], max_tokens: int, seed: int,
              out_dir: Path) -> "Anchors":
        """The start model's greedy answers to the anchor prompts, saved to `out_dir/anchors.pkl`."""
        tasks = anchor_tasks(cfg)
        params = SamplingParams(temperature=0.0, max_tokens=max_tokens, stop_token_ids=tuple(stop_ids))
        trajs = rollout(engine, tokenizer, tasks, [1] * len(tasks), params, [0] * len(tasks), engine.version)
        groups = []
        for task, (t,) in zip(tasks, trajs):
            if not any(t.loss_mask) or (t.finish_reason != "stop" and not cfg.keep_truncated):
                continue
            t = replace(t, reward=cfg.weight)
            groups.append(Group(task=task, trajectories=(t,), raw=(None,), policy_version=t.policy_version,
                                anchor=True))
        if not groups:
            raise CheckpointError(f"anchor.tasks: the start model finished none of its {len(tasks)} answers "
                                  f"within {max_tokens} tokens; raise rollout.max_tokens or set keep_truncated")
        write_checked_pickle(Path(out_dir) / FILE, {"format": FORMAT, "groups": groups})
        return cls(cfg, groups, seed)

    @classmethod
    def load(cls, out_dir: Path, cfg: AnchorConfig, seed: int) -> "Anchors":
        data = read_checked_pickle(Path(out_dir) / FILE, "anchors")
        if data.get("format") != FORMAT:
            raise CheckpointError(f"{Path(out_dir) / FILE}: anchors format {data.get('format')!r}, expected {FORMAT}")
        return cls(cfg, data["groups"], seed)

    def for_step(self, step: int) -> list[Group]:
        """The `per_step` anchor groups of step `step` (the same for the same (seed, step))."""
        k = min(self.cfg.per_step, len(self.groups))
        rng = random.Random(f"anchors/{self.seed}/{step}")
        return [self.groups[i] for i in sorted(rng.sample(range(len(self.groups)), k))]

    def summary(self) -> dict[str, float]:
        lengths = [sum(g.trajectories[0].loss_mask) for g in self.groups]
        return {"anchor/count": float(len(self.groups)), "anchor/mean_tokens": sum(lengths) / max(1, len(lengths))}
