"""Sampler/trainer mismatch as tensor functions: the log-prob gap metric and truncated importance-sampling weights.

A sampler other than the trainer's own forward (vLLM: other kernels, other batching, bf16 on a
GPU) gives each sampled token a log-prob a little different from the one the trainer recomputes,
so the "on-policy" samples are slightly off-policy. `logprob_gap` measures it
(`sampler_logprob_gap/<agent>`); `truncated_is_weights` is the standard correction
(truncated importance sampling): scale each token's loss by pi_trainer / pi_sampler, capped at C.
"""

from __future__ import annotations

import torch


def logprob_gap(sampler_logp: torch.Tensor, trainer_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean |sampler log-prob - trainer log-prob| over real tokens. All [K, T]; mask is 1 on real tokens.

    >>> s = torch.tensor([[-1.0, -2.0, 0.0]]); t = torch.tensor([[-1.5, -2.0, -9.0]]); m = torch.tensor([[1.0, 1.0, 0.0]])
    >>> float(logprob_gap(s, t, m))
    0.25
    """
    return ((sampler_logp - trainer_logp).abs() * mask).sum() / mask.sum().clamp(min=1)


def truncated_is_weights(trainer_logp: torch.Tensor, sampler_logp: torch.Tensor, cap: float = 2.0) -> torch.Tensor:
    """Per-token min(pi_trainer / pi_sampler, cap), detached: multiply each token's policy-gradient loss by it. [K, T].

    trainer_logp is the trainer's log-prob of the sampled token under the policy that sampled it (before the
    update); a token the sampler over-sampled gets less weight, one it under-sampled gets more, up to `cap`.

    >>> w = truncated_is_weights(torch.tensor([[0.0, -1.0]]), torch.tensor([[-1.0, -1.0]]), cap=2.0)
    >>> [round(float(x), 3) for x in w[0]]
    [2.0, 1.0]
    """
    return (trainer_logp.detach() - sampler_logp).exp().clamp(max=cap)


def recorded_is_weights(
    trainer_logp: torch.Tensor, sampler_logp: torch.Tensor, recorded: torch.Tensor, cap: float
) -> torch.Tensor:
    """`truncated_is_weights` on the tokens the sampler recorded (`recorded` 1), and 1 on the others. All [K, T].

    >>> w = recorded_is_weights(torch.tensor([[0.0, 0.0]]), torch.tensor([[-3.0, 0.0]]), torch.tensor([[1.0, 0.0]]), cap=2.0)
    >>> w.tolist()
    [[2.0, 1.0]]
    """
    weights = truncated_is_weights(trainer_logp, sampler_logp, cap)
    return torch.where(recorded.bool(), weights, torch.ones_like(weights))
