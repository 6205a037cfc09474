"""Cross-agent distillation: a source agent's best trajectories become supervised targets for others.

Text level: the source's observation (chat messages) is re-encoded with the target's tokenizer
and template, and the source's action text is the completion, so it works across tokenizers.
Every `every` steps, after the RL update, each target takes one extra optimizer step on
`weight` x the token-mean negative log-likelihood of the source's `top_k` best samples. A sample
qualifies only if the team had solved the problem when its turn ended (`Sample.team_success`;
`require_success: false` relaxes this to reward > 0) and it was not cut off at `max_new_tokens`
(`keep_truncated: true` keeps those): a well-formed but wrong call, or half an answer, is not
something to imitate. The target's EOS ends a target only when the source's sample ended with its
own EOS, so a kept truncated sample does not teach the target to stop there.
"""

from __future__ import annotations

import math

import torch

from pettingllms_cli import distributed
from pettingllms_cli.algorithms.optim import guarded_step
from pettingllms_cli.algorithms.settings import DistillSettings
from pettingllms_cli.envs.messages import generated_part
from pettingllms_cli.policy.adapters import Team
from pettingllms_cli.policy.logprobs import group_logprobs
from pettingllms_cli.rollout.records import Sample


def is_truncated(completion: torch.Tensor, eos: int | None, max_new_tokens: int) -> bool:
    """Sampling stopped at the token limit, not at EOS (completions are cut after their first EOS).

    >>> [is_truncated(torch.tensor(ids), 2, 3) for ids in ([5, 6, 2], [5, 6, 7], [5])]
    [False, True, False]
    """
    return len(completion) >= max_new_tokens and (eos is None or int(completion[-1]) != eos)


def best_trajectories(
    samples: list[Sample], source: str, top_k: int, truncated: set[int] = frozenset(), require_success: bool = True
) -> list[Sample]:
    """The source's top_k distinct samples by reward among those that led the team to success (reward > 0 when
    not `require_success`), leaving out those whose index in `samples` is in `truncated`.

    Ties are broken by (problem, turn, role, text), not by list order, so the choice is the same
    however the step's samples were gathered (one process, or several ranks in rank order).
    """
    seen, best = set(), []
    mine = (
        s
        for i, s in enumerate(samples)
        if s.agent == source and s.reward > 0 and (s.team_success or not require_success) and i not in truncated
    )
    for s in sorted(mine, key=lambda s: (-s.reward, s.problem_id, s.turn, s.role, s.text)):
        key = (repr(s.messages), s.text)
        if key not in seen:
            seen.add(key)
            best.append(s)
    return best[:top_k]


def encode_pair(team: Team, agent: str, sample: Sample) -> tuple[torch.Tensor, torch.Tensor]:
    """(prompt [Lp], completion [1, Lc]) of a sample, in `agent`'s tokenizer; it ends with EOS when the source's did."""
    messages = sample.messages
    tokenizer = team.tokenizer_of(agent)
    action = generated_part(messages, sample.text)  # the target is asked to continue the same prefill
    source_eos = team.tokenizer_of(sample.agent).eos_token_id
    ended = len(sample.completion) > 0 and int(sample.completion[-1]) == source_eos
    ids = tokenizer(action, add_special_tokens=False)["input_ids"] + ([tokenizer.eos_token_id] if ended else [])
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


def distill_step(
    team: Team,
    optimizer: torch.optim.Optimizer,
    params: list[torch.nn.Parameter],
    target: str,
    samples: list[Sample],
    weight: float,
    max_grad_norm: float,
) -> tuple[float, bool]:
    """One optimizer step of the target's adapter on weight x token-mean NLL; returns that NLL (unweighted) and
    whether the step was skipped (a non-finite NLL or gradient, algorithms/optim.py).

    Under data parallelism every rank holds the same `samples`: each scores its shard, and the
    NLL sums and gradients are added over ranks, so adapters stay identical on every rank.
    """
    optimizer.zero_grad(set_to_none=True)
    total, tokens = nll(team, target, distributed.shard(samples), grad=True)
    total_all, tokens_all = distributed.all_reduce_sum([float(total.detach()), tokens]).tolist()
    loss = total_all / max(tokens_all, 1)
    finite = math.isfinite(loss)
    if finite and total.requires_grad:  # a rank whose shard is empty adds zeros in the all-reduce
        (weight * total / max(tokens_all, 1)).backward()
    norm = guarded_step(optimizer, params, max_grad_norm, finite)
    return loss, not math.isfinite(norm)


def distill(
    team: Team, optimizers: dict[str, torch.optim.Optimizer], samples: list[Sample], step: int, settings: DistillSettings
) -> dict[str, float]:
    """Run the distillations due after step `step` (0-based); returns `distill_loss/<target>` and, for a
    step skipped because it was not finite, `distill_skipped/<target>` (1 per skipped step)."""
    out: dict[str, float] = {}
    for d in settings.distillations:
        if (step + 1) % d.every:
            continue
        eos, limit = team.tokenizer_of(d.source).eos_token_id, settings.max_new_tokens
        cut = {i for i, s in enumerate(samples) if s.agent == d.source and is_truncated(s.completion, eos, limit)}
        cut = set() if d.keep_truncated else cut
        best = best_trajectories(samples, d.source, d.top_k, cut, d.require_success)
        for target in sorted(d.targets):
            if best:
                adapter = settings.adapters[target]
                out[f"distill_loss/{target}"], skipped = distill_step(
                    team, optimizers[adapter], team.params[adapter], target, best, d.weight, settings.max_grad_norm
                )
                if skipped:
                    out[f"distill_skipped/{target}"] = out.get(f"distill_skipped/{target}", 0) + 1
    return out
