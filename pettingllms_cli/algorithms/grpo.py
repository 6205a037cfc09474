"""AT-GRPO's math as pure tensor functions (docs/design.md, "The algorithm"); shapes in comments."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence

import torch


def group_advantages(
    rewards: torch.Tensor,
    groups: Sequence[Hashable],
    scale: str = "group",
    eps: float = 1e-4,
    batch_std: float | None = None,
) -> torch.Tensor:
    """GRPO advantages: reward minus its group's mean, divided by `scale` (`algorithm.scale_rewards`).

    rewards: [N]; groups: N group keys. Returns [N]. A group of equal rewards gives zeros whatever the scale.
    `group`: the group's std (unbiased, as TRL); `batch`: `batch_std`, the std of every reward in the step (of
    `rewards` when not given; the loop passes the one over all ranks); `none`: centred only (Dr. GRPO).

    >>> [round(a, 3) for a in group_advantages(torch.tensor([1., 0., 3., 3.]), ["a", "a", "b", "b"]).tolist()]
    [0.707, -0.707, 0.0, 0.0]
    >>> [round(a, 3) for a in group_advantages(torch.tensor([0.05, -0.05]), ["a", "a"], scale="none").tolist()]
    [0.05, -0.05]
    """
    members: dict[Hashable, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        members[g].append(i)
    if scale == "batch" and batch_std is None:
        batch_std = float(rewards.std()) if len(rewards) > 1 else 0.0
    adv = torch.zeros_like(rewards)
    for idx in members.values():
        r = rewards[idx]  # [G]
        if r.max() == r.min():
            continue  # exactly zero, not float noise: such a group carries no signal
        centred = r - r.mean()
        if scale == "group" and len(idx) > 1:
            centred = centred / (r.std() + eps)
        elif scale == "batch":
            centred = centred / (batch_std + eps)
        adv[idx] = centred
    return adv


def batch_std(n: float, total: float, squares: float) -> float:
    """Unbiased std of n rewards from their sum and sum of squares (summed over ranks, so every rank agrees).

    >>> round(batch_std(4, 2.0, 2.0), 4)  # rewards 1, 1, 0, 0: mean 0.5, variance (4 * 0.25) / 3
    0.5774
    """
    if n < 2:
        return 0.0
    return max(0.0, (squares - total * total / n) / (n - 1)) ** 0.5


def zero_std_groups(rewards: torch.Tensor, groups: Sequence[Hashable]) -> set[Hashable]:
    """Keys of groups whose rewards are all equal (they carry no learning signal)."""
    values: dict[Hashable, list[float]] = defaultdict(list)
    for r, g in zip(rewards.tolist(), groups, strict=False):
        values[g].append(r)
    return {g for g, v in values.items() if max(v) - min(v) == 0}


def ppo_clip_loss(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, clip_eps: float, clip_eps_high: float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token PPO-clip surrogate to minimise, and whether each token was clipped.

    The ratio is clipped to [1 - clip_eps, 1 + clip_eps_high] (clip-higher; None: clip_eps on both sides).
    logp, old_logp: [K, T]; advantages: [K]. Returns ([K, T], [K, T] bool).
    """
    ratio = torch.exp(logp - old_logp)  # [K, T]
    adv = advantages[:, None]  # [K, 1]
    unclipped = ratio * adv
    high = clip_eps if clip_eps_high is None else clip_eps_high
    clipped = torch.clamp(ratio, 1 - clip_eps, 1 + high) * adv
    loss = -torch.minimum(unclipped, clipped)
    return loss, (clipped < unclipped)


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(policy || reference): exp(d) - d - 1 with d = ref - logp. [K, T]"""
    d = ref_logp - logp
    return torch.exp(d) - d - 1


def masked_sum(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum()
