"""AT-GRPO's math as pure tensor functions (docs/design.md, "The algorithm"); shapes in comments."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence

import torch


def group_advantages(rewards: torch.Tensor, groups: Sequence[Hashable], scale: bool = True, eps: float = 1e-4) -> torch.Tensor:
    """GRPO advantages: reward minus its group's mean, over the group's std (unbiased, as TRL).

    rewards: [N]; groups: N group keys. Returns [N]. A group of equal rewards gives zeros.

    >>> [round(a, 3) for a in group_advantages(torch.tensor([1., 0., 3., 3.]), ["a", "a", "b", "b"]).tolist()]
    [0.707, -0.707, 0.0, 0.0]
    """
    members: dict[Hashable, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        members[g].append(i)
    adv = torch.zeros_like(rewards)
    for idx in members.values():
        r = rewards[idx]  # [G]
        if r.max() == r.min():
            continue  # exactly zero, not float noise: such a group carries no signal
        centred = r - r.mean()
        if scale and len(idx) > 1:
            centred = centred / (r.std() + eps)
        adv[idx] = centred
    return adv


def zero_std_groups(rewards: torch.Tensor, groups: Sequence[Hashable]) -> set[Hashable]:
    """Keys of groups whose rewards are all equal (they carry no learning signal)."""
    values: dict[Hashable, list[float]] = defaultdict(list)
    for r, g in zip(rewards.tolist(), groups, strict=False):
        values[g].append(r)
    return {g for g, v in values.items() if max(v) - min(v) == 0}


def ppo_clip_loss(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, clip_eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token PPO-clip surrogate to minimise, and whether each token was clipped.

    logp, old_logp: [K, T]; advantages: [K]. Returns ([K, T], [K, T] bool).
    """
    ratio = torch.exp(logp - old_logp)  # [K, T]
    adv = advantages[:, None]  # [K, 1]
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * adv
    loss = -torch.minimum(unclipped, clipped)
    return loss, (clipped < unclipped)


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(policy || reference): exp(d) - d - 1 with d = ref - logp. [K, T]"""
    d = ref_logp - logp
    return torch.exp(d) - d - 1


def masked_sum(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum()
