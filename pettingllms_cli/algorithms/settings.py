"""What the algorithms read of the spec, as frozen records the training layer builds once
(training/update_settings.py): the update, the optimizers and distillation, each unit-testable without a whole spec."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class UpdateSettings:
    """The PPO-clip update (update.py)."""

    adapters: dict[str, str]  # agent -> the adapter it trains (every agent of the team)
    update_epochs: int
    clip_eps: float
    kl_coef: float
    max_grad_norm: float
    temperature: float  # the log-probs' distribution is the one sampled from ...
    top_k: int | None = None  # ... truncated as sampling did (None or 0: not truncated)
    top_p: float = 1.0
    clip_eps_high: float | None = None  # clip-higher; None: clip_eps on both sides
    tis_cap: float | None = None  # truncated importance sampling against a sampler's own log-probs
    log_lr: bool = False  # a learning-rate schedule moves the lr: report it per agent

    def agents_of(self, adapter: str) -> list[str]:
        return sorted(agent for agent, a in self.adapters.items() if a == adapter)

    def truncation(self) -> dict:
        """`group_logprobs`' top_k/top_p keywords: sampling's truncation, or none."""
        return {"top_k": self.top_k, "top_p": self.top_p} if self.top_k or self.top_p < 1 else {}


@dataclass(frozen=True)
class OptimSettings:
    """One AdamW per adapter with its learning-rate schedule (optim.py)."""

    lr: float
    weight_decay: float
    schedule: str  # transformers' scheduler name
    warmup_steps: int
    steps: int  # the run's training steps: the schedule's length


@dataclass(frozen=True)
class Distillation:
    """One cross-agent distillation (distill.py)."""

    source: str
    targets: tuple[str, ...]
    every: int
    top_k: int
    require_success: bool
    keep_truncated: bool
    weight: float


@dataclass(frozen=True)
class DistillSettings:
    adapters: dict[str, str]  # agent -> adapter
    distillations: tuple[Distillation, ...]
    max_new_tokens: int  # a source sample this long without EOS was cut off
    max_grad_norm: float
