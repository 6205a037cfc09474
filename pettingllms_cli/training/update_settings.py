"""The algorithms' settings records (algorithms/settings.py), built once from the spec by the training layer."""

from __future__ import annotations

import math

from pettingllms_cli.algorithms.settings import Distillation, DistillSettings, OptimSettings, UpdateSettings
from pettingllms_cli.spec import Experiment


def adapters(spec: Experiment) -> dict[str, str]:
    """agent -> the adapter it trains."""
    return {agent: spec.adapter_of(agent) for agent in sorted(spec.agents)}


def update_settings(spec: Experiment) -> UpdateSettings:
    algo, train = spec.algorithm, spec.train
    return UpdateSettings(
        adapters=adapters(spec),
        update_epochs=algo.update_epochs,
        clip_eps=algo.clip_eps,
        kl_coef=algo.kl_coef,
        max_grad_norm=algo.max_grad_norm,
        temperature=train.temperature,
        top_k=train.top_k,
        top_p=train.top_p,
        clip_eps_high=algo.clip_eps_high,
        tis_cap=algo.tis_cap,
        log_lr=algo.lr_scheduler_type != "constant" or bool(algo.warmup_steps or algo.warmup_ratio),
    )


def optim_settings(spec: Experiment) -> OptimSettings:
    """`warmup_steps`, or `warmup_ratio` of the run's steps rounded up (as transformers' TrainingArguments does)."""
    algo, steps = spec.algorithm, spec.train.steps
    warmup = algo.warmup_steps or math.ceil(algo.warmup_ratio * steps)
    schedule = "constant_with_warmup" if algo.lr_scheduler_type == "constant" and warmup else algo.lr_scheduler_type
    return OptimSettings(lr=algo.lr, weight_decay=algo.weight_decay, schedule=schedule, warmup_steps=warmup, steps=steps)


def distill_settings(spec: Experiment) -> DistillSettings:
    return DistillSettings(
        adapters=adapters(spec),
        distillations=tuple(
            Distillation(
                source=d.source,
                targets=tuple(sorted(d.targets)),
                every=d.every,
                top_k=d.top_k,
                require_success=d.require_success,
                keep_truncated=d.keep_truncated,
                weight=d.weight,
            )
            for d in spec.distill
        ),
        max_new_tokens=spec.train.max_new_tokens,
        max_grad_norm=spec.algorithm.max_grad_norm,
    )
