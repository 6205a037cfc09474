"""A step's advantages, computed beside its samples (one per sample, in order): GRPO's group-normalised advantage,
a judge's weighted by its tally of cases under `reward.balance_verdicts` (envs/verdicts.py)."""

from __future__ import annotations

import torch

from pettingllms_cli.algorithms.grpo import group_advantages, zero_std_groups
from pettingllms_cli.envs.verdicts import Tally, add_tallies, verdict_tally, verdict_weights
from pettingllms_cli.rollout.records import Sample
from pettingllms_cli.spec import Experiment
from pettingllms_cli.training.ranks import batch_spread, sum_tally


def tally_verdicts(spec: Experiment, seen: Tally, samples: list[Sample]) -> Tally:
    """`reward.balance_verdicts`: each judge's [actions due approval, due sending back] so far, this step's (every
    rank's) included; {} when off."""
    if not spec.reward.balance_verdicts:
        return {}
    step = verdict_tally([s.agent for s in samples], [s.verdict_due for s in samples])
    return add_tallies(seen, sum_tally(step, spec.agents))


def compute_advantages(spec: Experiment, samples: list[Sample], verdicts: Tally | None = None) -> tuple[list[float], set]:
    """Each sample's group-normalised advantage, in the samples' order (judges' weighted by `verdicts` under
    `reward.balance_verdicts`), and the groups filtered out (zero std, `algorithm.filter_zero_std`)."""
    rewards = torch.tensor([s.reward for s in samples], dtype=torch.float32)
    groups = [s.group for s in samples]
    scale = spec.algorithm.scale_rewards
    spread = batch_spread(rewards) if scale == "batch" else None  # one std over every rank's rewards
    advantages = group_advantages(rewards, groups, scale=scale, batch_std=spread)
    if verdicts:
        due = [s.verdict_due for s in samples]
        advantages = advantages * torch.tensor(verdict_weights([s.agent for s in samples], due, verdicts), dtype=torch.float32)
    dropped = zero_std_groups(rewards, groups) if spec.algorithm.filter_zero_std else set()
    return advantages.tolist(), dropped


def without_groups(samples: list[Sample], advantages: list[float], dropped: set) -> tuple[list[Sample], list[float]]:
    """The samples the update trains on, with their advantages: those outside the `dropped` groups."""
    kept = [i for i, s in enumerate(samples) if s.group not in dropped]
    return [samples[i] for i in kept], [advantages[i] for i in kept]
