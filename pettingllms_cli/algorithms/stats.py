"""What an update measured, as typed records: `Sums` adds up per group and pass, `AgentStats` is the per-agent
result the metrics read (training/metrics.py), built once from the sums."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class Sums:
    """An agent's sums over the completion tokens of its groups, over every pass; `+` adds two field by field."""

    tokens: int = 0  # completion tokens in the loss's token mean (its denominator), counted in the first pass
    trained_tokens: int = 0  # of those, the tokens whose loss has a gradient
    loss: float = 0.0
    kl: float = 0.0
    entropy: float = 0.0
    clip: float = 0.0  # clipped tokens
    gap: float = 0.0  # |sampler - trainer| log-prob, over `gap_tokens` (the tokens the sampler recorded)
    gap_tokens: float = 0.0
    tis: float = 0.0  # truncated importance weights, over `tis_tokens`
    tis_tokens: float = 0.0

    def __add__(self, other: Sums) -> Sums:
        return Sums(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in dataclasses.fields(self)})


RANK_SUMMED = ("tokens", "trained_tokens", "loss", "kl", "entropy", "clip")  # the sums added over ranks (update.py)


@dataclass(frozen=True)
class AgentStats:
    loss: float = 0.0
    kl: float = 0.0
    entropy: float = 0.0
    clip_frac: float = 0.0
    tokens: int = 0  # completion tokens in the loss's token mean (its denominator)
    trained_tokens: int = 0  # of those, the tokens whose loss has a gradient (non-zero advantage, or kl_coef > 0)
    grad_norm: float = 0.0
    skipped: bool = False
    logprob_gap: float | None = None  # mean |sampler - trainer| log-prob per token; only with a sampler's log-probs
    tis_weight: float | None = None  # mean truncated importance weight per token; only with algorithm.tis_cap
    lr: float | None = None  # the learning rate the step trained at; only with a schedule (algorithm.lr_scheduler_type)


def agent_stats(sums: Sums, passes: int, grad_norm: float, skipped: bool, lr: float | None) -> AgentStats:
    """The means an agent's `sums` give: the loss terms per token and pass, the sampler's gap and weight per token
    it recorded (None when it recorded none)."""
    n = max(sums.tokens, 1) * passes  # the sums cover every pass
    return AgentStats(
        loss=sums.loss / n,
        kl=sums.kl / n,
        entropy=sums.entropy / n,
        clip_frac=sums.clip / n,
        tokens=sums.tokens,
        trained_tokens=sums.trained_tokens,
        grad_norm=grad_norm,
        skipped=skipped,
        logprob_gap=sums.gap / sums.gap_tokens if sums.gap_tokens else None,
        tis_weight=sums.tis / sums.tis_tokens if sums.tis_tokens else None,
        lr=lr,
    )
