"""The optimizers the training loop owns (one AdamW per adapter, each with its learning-rate schedule), and the one
guarded step RL and distillation share."""

from __future__ import annotations

import math

import torch
from torch.optim.lr_scheduler import LRScheduler
from transformers import get_scheduler

from pettingllms_cli import distributed
from pettingllms_cli.policy.adapters import Team
from pettingllms_cli.spec.algorithm import AlgorithmSpec


class Optimizers(dict):
    """adapter -> AdamW, with `schedulers`: adapter -> its learning-rate schedule (stepped once per training step by
    algorithms/update.py; both checkpointed by training/checkpoint.py)."""

    schedulers: dict[str, LRScheduler]


def make_optimizers(team: Team) -> Optimizers:
    """adapter -> AdamW over its LoRA parameters, each with `algorithm.lr_scheduler_type`'s schedule over train.steps."""
    algo, steps = team.spec.algorithm, team.spec.train.steps
    optimizers = Optimizers(
        (adapter, torch.optim.AdamW(params, lr=algo.lr, weight_decay=algo.weight_decay))
        for adapter, params in sorted(team.params.items())
    )
    optimizers.schedulers = {name: make_scheduler(opt, algo, steps) for name, opt in optimizers.items()}
    return optimizers


def warmup_steps(algo: AlgorithmSpec, steps: int) -> int:
    """`warmup_steps`, or `warmup_ratio` of the run's steps rounded up (as transformers' TrainingArguments does).

    >>> from pettingllms_cli.spec.algorithm import AlgorithmSpec
    >>> warmup_steps(AlgorithmSpec(warmup_ratio=0.1), 25), warmup_steps(AlgorithmSpec(warmup_steps=3), 25)
    (3, 3)
    """
    return algo.warmup_steps or math.ceil(algo.warmup_ratio * steps)


def make_scheduler(optimizer: torch.optim.Optimizer, algo: AlgorithmSpec, steps: int) -> LRScheduler:
    """transformers' schedule for the spec; `constant` without warmup keeps the learning rate at `lr` throughout."""
    warmup = warmup_steps(algo, steps)
    name = "constant_with_warmup" if algo.lr_scheduler_type == "constant" and warmup else algo.lr_scheduler_type
    return get_scheduler(name, optimizer, num_warmup_steps=warmup, num_training_steps=steps)


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
