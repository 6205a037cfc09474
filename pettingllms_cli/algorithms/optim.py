"""The optimizers the training loop owns (one AdamW per adapter), and the one guarded step RL and distillation share."""

from __future__ import annotations

import math

import torch

from pettingllms_cli import distributed
from pettingllms_cli.policy.adapters import Team


def make_optimizers(team: Team) -> dict[str, torch.optim.Optimizer]:
    """adapter -> AdamW over its LoRA parameters (their states are checkpointed by training/checkpoint.py)."""
    algo = team.spec.algorithm
    return {
        adapter: torch.optim.AdamW(params, lr=algo.lr, weight_decay=algo.weight_decay)
        for adapter, params in sorted(team.params.items())
    }


def guarded_step(optimizer: torch.optim.Optimizer, params: list[torch.nn.Parameter], max_grad_norm: float, finite: bool) -> float:
    """Sum the gradients over ranks, clip and step; returns the gradient norm, NaN when the step was skipped.

    Skipped on every rank when any rank's loss was non-finite (`finite` False), or when the summed
    gradient's norm is not finite; the weights and the optimizer state then stay as they were.
    Collective: every rank calls it for every adapter, with or without samples.
    """
    finite = not distributed.any_rank(not finite)  # one rank's non-finite loss skips the step on every rank
    if finite:
        distributed.all_reduce_grads(params)  # global token mean: the sum is the 1-process gradient
    norm = float(torch.nn.utils.clip_grad_norm_(params, max_grad_norm)) if finite else math.nan
    if math.isfinite(norm):
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return norm
