"""The optimizers the training loop owns (one AdamW per adapter, each with its learning-rate schedule), and the one
guarded step RL and distillation share."""

from __future__ import annotations

import math

import torch
from torch.optim.lr_scheduler import LRScheduler
from transformers import get_scheduler

from pettingllms_cli import distributed
from pettingllms_cli.algorithms.settings import OptimSettings
from pettingllms_cli.policy.adapters import Team


class Optimizers(dict):
    """adapter -> AdamW, with `schedulers`: adapter -> its learning-rate schedule (stepped once per training step by
    algorithms/update.py; both checkpointed by training/checkpoint.py)."""

    schedulers: dict[str, LRScheduler]


def make_optimizers(team: Team, settings: OptimSettings) -> Optimizers:
    """adapter -> AdamW over its LoRA parameters, each with the settings' learning-rate schedule over the run's steps."""
    optimizers = Optimizers(
        (adapter, torch.optim.AdamW(params, lr=settings.lr, weight_decay=settings.weight_decay))
        for adapter, params in sorted(team.params.items())
    )
    optimizers.schedulers = {name: make_scheduler(opt, settings) for name, opt in optimizers.items()}
    return optimizers


def make_scheduler(optimizer: torch.optim.Optimizer, settings: OptimSettings) -> LRScheduler:
    """transformers' schedule; `constant` without warmup keeps the learning rate at `lr` throughout."""
    return get_scheduler(settings.schedule, optimizer, num_warmup_steps=settings.warmup_steps, num_training_steps=settings.steps)


def restore_schedule(sched: LRScheduler, saved: dict | None, step: int, lr: float) -> None:
    """Continue a learning-rate schedule where the checkpoint left it: its saved position (a checkpoint from before
    schedules: `step`, where a schedule would be), from the spec's `lr` (they differ only after --force)."""
    if saved is not None:
        try:
            sched.load_state_dict(saved)
        except (TypeError, ValueError, KeyError, AttributeError):  # a hand-edited state: the step says where it was
            saved = None
    if saved is None:
        sched.last_epoch = step
    sched.base_lrs = [lr for _ in sched.optimizer.param_groups]
    for group, base, factor in zip(sched.optimizer.param_groups, sched.base_lrs, sched.lr_lambdas, strict=True):
        group["lr"] = base * factor(sched.last_epoch)
    sched._last_lr = [group["lr"] for group in sched.optimizer.param_groups]


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
