"""Cross-agent distillation: a source agent's best trajectories become supervised targets for others.

Text level: the source's observation (chat messages) is re-encoded with the target's tokenizer
and template, and the source's action text is the completion, so it works across tokenizers.
Every `every` steps, after the RL update, each target takes one extra optimizer step on
`weight` x the token-mean negative log-likelihood of the source's `top_k` best samples.
"""

from __future__ import annotations

import math

import torch

from pettingllms_cli.policy import Team, group_logprobs
from pettingllms_cli.rollout import Sample


def best_trajectories(samples: list[Sample], source: str, top_k: int) -> list[Sample]:
    """The source's top_k distinct samples by reward (reward > 0), ties broken by their order."""
    seen, best = set(), []
    for s in sorted((s for s in samples if s.agent == source and s.reward > 0), key=lambda s: -s.reward):
        key = (repr(s.messages), s.text)
        if key not in seen:
            seen.add(key)
            best.append(s)
    return best[:top_k]


def encode_pair(team: Team, agent: str, sample: Sample) -> tuple[torch.Tensor, torch.Tensor]:
    """(prompt [Lp], completion [1, Lc]) of a sample, in `agent`'s tokenizer; the completion ends with EOS."""
    messages = sample.messages
    prefill = messages[-1]["content"] if messages and messages[-1]["role"] == "assistant" else ""
    tokenizer = team.tokenizer_of(agent)
    action = sample.text[len(prefill) :] if sample.text.startswith(prefill) else sample.text
    ids = tokenizer(action, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return torch.tensor(team.encode(agent, messages)), torch.tensor([ids])


def nll(team: Team, agent: str, samples: list[Sample], grad: bool = False) -> tuple[torch.Tensor, int]:
    """Summed negative log-likelihood of the samples' actions under `agent`, and their token count."""
    model = team.activate(agent)
    total, tokens = torch.zeros(()), 0
    with torch.set_grad_enabled(grad):
        for s in samples:
            prompt, completion = encode_pair(team, agent, s)
            logp, _ = group_logprobs(model, prompt, completion, temperature=1.0)  # [1, Lc]
            total = total + (-logp.sum()).cpu()
            tokens += completion.shape[1]
    return total, tokens


def distill_step(team: Team, target: str, samples: list[Sample], weight: float) -> float:
    """One optimizer step of the target's adapter on weight x token-mean NLL; returns that NLL (unweighted)."""
    adapter = team.spec.adapter_of(target)
    optimizer = team.optimizers[adapter]
    optimizer.zero_grad(set_to_none=True)
    total, tokens = nll(team, target, samples, grad=True)
    loss = total / max(tokens, 1)
    if torch.isfinite(loss):
        (weight * loss).backward()
        norm = torch.nn.utils.clip_grad_norm_(team.params[adapter], team.spec.algorithm.max_grad_norm)
        if math.isfinite(float(norm)):
            optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(loss.detach())


def distill(team: Team, samples: list[Sample], step: int) -> dict[str, float]:
    """Run the spec's distillations due after step `step` (0-based); returns `distill_loss/<target>`."""
    losses: dict[str, float] = {}
    for d in team.spec.distill:
        if (step + 1) % d.every:
            continue
        best = best_trajectories(samples, d.source, d.top_k)
        for target in sorted(d.targets):
            if best:
                losses[f"distill_loss/{target}"] = distill_step(team, target, best, d.weight)
    return losses
