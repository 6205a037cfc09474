"""One optimizer step per adapter: PPO-clip (+ optional k3 KL) on the agent's own samples.

Samples that share a prompt are scored in one forward (the prompt once, its cache expanded to
the K completions), and each forward is backpropagated at once, so memory holds one group. The
preamble all of an adapter's groups share is run once per pass with gradients (policy/logprobs.py
`run_prefix`): each group runs only its own prompt tokens on it, and one backward through it follows the groups'.
The loss is the token mean over all of an adapter's samples: each group's token sum is divided
by the adapter's total completion tokens before backward, so accumulation equals one big batch.
Under data parallelism (distributed.py) that total counts every rank's tokens and the gradients
are summed over ranks before clipping, so every rank steps with the 1-process gradient.

With `algorithm.update_epochs` > 1 the step makes that many passes, each with its own optimizer
step, and the PPO ratio is taken against the sampling policy's log-probs (stored in the first
pass), so `clip_eps` binds and `clip_frac` is non-zero (docs/design.md, "The update"); `clip_eps_high`
widens the upper side (clip-higher). The learning-rate schedules step once per call: once per training step.
`train.top_k`/`top_p` truncate the distribution the log-probs are taken from, as sampling did (sampling.py).

With a sampler other than the trainer (`sampler: vllm`), the sampled tokens' own log-probs come in
too: `logprob_gap` measures how far they are from the trainer's, and with `algorithm.tis_cap` each
token's policy-gradient term is weighted by min(pi_trainer / pi_sampler, cap) (truncated importance
sampling, offpolicy.py; docs/vllm.md).

Guard (algorithms/optim.py): a non-finite loss (before its backward) or a non-finite gradient
norm skips that adapter's optimizer step for this pass; its agents get `skipped = True` and their weights and
optimizer state stay as they were.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections import defaultdict
from collections.abc import Sequence

import torch

from pettingllms_cli import distributed
from pettingllms_cli.algorithms.grpo import k3_kl, masked_sum, ppo_clip_loss
from pettingllms_cli.algorithms.offpolicy import logprob_gap, recorded_is_weights
from pettingllms_cli.algorithms.optim import guarded_step
from pettingllms_cli.algorithms.settings import UpdateSettings
from pettingllms_cli.algorithms.stats import RANK_SUMMED, AgentStats, Sums, agent_stats
from pettingllms_cli.memory import release_freed_memory
from pettingllms_cli.policy.adapters import Team
from pettingllms_cli.policy.logprobs import PromptPrefix, group_logprobs, logprob_key, pad, run_prefix
from pettingllms_cli.rollout.records import Sample

Scored = tuple[Sample, float]  # a sample and its advantage (the loop computes advantages beside the samples)


def _by_prompt(scored: list[Scored]) -> dict[tuple, list[Scored]]:
    batches: dict[tuple, list[Scored]] = defaultdict(list)
    for s, a in scored:
        batches[(s.agent, tuple(s.prompt))].append((s, a))
    return batches


def update(
    team: Team,
    optimizers: dict[str, torch.optim.Optimizer],
    samples: list[Sample],
    advantages: Sequence[float],
    settings: UpdateSettings,
    sampler_logp: dict[tuple, torch.Tensor] | None = None,
) -> dict[str, AgentStats]:
    """`settings.update_epochs` passes over the samples, each a backward and an optimizer step per adapter.

    `advantages`: one per sample, in the same order (the loop's `compute_advantages`).

    `sampler_logp` (a vLLM sampler's `take_logprobs()`): the sampled tokens' log-probs by `logprob_key`; when given,
    each agent's `logprob_gap` is the mean |sampler - trainer| log-prob over the completion tokens the first pass
    scores (this rank's samples). The loss uses them only with `algorithm.tis_cap` (truncated importance sampling,
    `batch_loss`); each agent's `tis_weight` is then the mean weight over those tokens.

    The PPO ratio is taken against the log-probs of the policy that sampled the batch: the first
    pass computes them (the adapters have not moved since sampling) and stores them, detached, for
    the later passes, where the clip binds. Returns stats per agent, averaged over the passes.
    """
    sums = {agent: Sums() for agent in settings.adapters}
    norms: dict[str, float] = {}  # agent -> its adapter's last gradient norm (NaN: that pass was skipped)
    skipped: set[str] = set()  # agents whose adapter skipped any pass
    by_adapter: dict[str, list[Scored]] = defaultdict(list)
    for s, a in zip(samples, advantages, strict=True):
        by_adapter[settings.adapters[s.agent]].append((s, a))
    passes = settings.update_epochs
    sampled: dict[tuple, torch.Tensor] | None = {} if passes > 1 else None  # (agent, prompt) -> old log-probs [K, Lc]
    for epoch in range(passes):
        for adapter in sorted(team.params):  # every adapter on every rank: the gradient all-reduce is collective
            own = by_adapter.get(adapter, [])
            norm, present = _update_adapter(
                team, settings, optimizers[adapter], adapter, own, sums, sampled, epoch == 0, sampler_logp
            )
            norms |= dict.fromkeys(present, norm)
            skipped |= set(present) if not math.isfinite(norm) else set()
    lrs = {agent: optimizers[a].param_groups[0]["lr"] if settings.log_lr else None for agent, a in settings.adapters.items()}
    with warnings.catch_warnings():  # an adapter without samples this step has not stepped: its schedule moves on
        warnings.filterwarnings("ignore", "Detected call of `lr_scheduler.step", UserWarning)
        for schedule in getattr(optimizers, "schedulers", {}).values():  # make_optimizers' Optimizers
            schedule.step()  # one learning-rate step per training step, however many passes it made
    sums = _sum_over_ranks(sums)
    return {a: agent_stats(sums[a], passes, norms.get(a, 0.0), a in skipped, lrs[a]) for a in settings.adapters}


def _update_adapter(
    team: Team,
    settings: UpdateSettings,
    optimizer: torch.optim.Optimizer,
    adapter: str,
    own: list[Scored],
    sums: dict[str, Sums],
    sampled: dict[tuple, torch.Tensor] | None,
    first: bool,
    sampler_logp: dict[tuple, torch.Tensor] | None = None,
) -> tuple[float, list[str]]:
    """Accumulate the adapter's gradient group by group into `sums`, then clip and step unless it is non-finite;
    returns the gradient norm (NaN: skipped) and the agents with samples on any rank (none: no step)."""
    agents = settings.agents_of(adapter)
    counts = [len(own), sum(len(s.completion) for s, _ in own), *(any(s.agent == a for s, _ in own) for a in agents)]
    n_samples, total_tokens, *present = (int(x) for x in distributed.all_reduce_sum(counts))  # over all ranks
    if n_samples == 0:
        return math.nan, []  # no rank has samples for this adapter
    optimizer.zero_grad(set_to_none=True)
    finite = True
    groups = sorted(_by_prompt(own).items(), key=lambda kv: kv[1][0][0].group)
    live = [(key, scored) for key, scored in groups if settings.kl_coef > 0 or any(a != 0 for _, a in scored)]
    trained_keys = {key for key, _ in live}
    prefix = _shared_prefix(team, live)
    for key, scored in groups:
        agent = key[0]
        batch, advantages = [s for s, _ in scored], [a for _, a in scored]
        if first:  # counted once however many passes
            trained = sum(len(s.completion) for s, a in scored if settings.kl_coef > 0 or a != 0)
            sums[agent] += Sums(tokens=sum(len(s.completion) for s in batch), trained_tokens=trained)
        if key not in trained_keys:
            continue  # no gradient signal: skip the forward, keep the tokens in the mean
        theirs = None if sampler_logp is None else sampler_rows(adapter, batch, sampler_logp)  # (log-probs, recorded)
        old = None if sampled is None else sampled.get(key)
        loss, logp, part = batch_loss(team, settings, agent, batch, advantages, old, theirs, prefix)
        sums[agent] += part
        if first and theirs is not None:
            sums[agent] += gap_sums(logp, *theirs)
        if sampled is not None and key not in sampled:
            sampled[key] = logp  # the sampling policy's log-probs, for the later passes
        loss = loss / total_tokens
        finite = finite and bool(torch.isfinite(loss))
        if finite:
            loss.backward()  # a non-finite loss never reaches the gradients
    if prefix is not None and finite:
        prefix.backward()  # every group's gradient through the shared preamble, once
    del prefix
    norm = guarded_step(optimizer, team.params[adapter], settings.max_grad_norm, finite)
    release_freed_memory()  # this adapter's activations: freed, so the next agent does not stack its own on top
    return norm, [a for a, n in zip(agents, present, strict=True) if n]


def _shared_prefix(team: Team, live: list[tuple[tuple, list[Scored]]]) -> PromptPrefix | None:
    """The preamble the adapter's trained groups share, run once through it (`run_prefix`); None for fewer than two."""
    if len(live) < 2:
        return None
    agent = live[0][0][0]  # every agent of the adapter runs it alike
    return run_prefix(team.activate(agent), [list(scored[0][0].prompt) for _, scored in live])


def sampler_rows(adapter: str, batch: list[Sample], sampler_logp: dict[tuple, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """The sampler's log-probs of a group's completions, right-padded like `pad` ([K, Lc] float32), and the mask of
    the tokens it recorded ([K, Lc] 0/1): a completion it did not record (or not whole) is 0 throughout."""
    width = max(len(s.completion) for s in batch)
    logps, recorded = torch.zeros(len(batch), width), torch.zeros(len(batch), width)
    for row, s in enumerate(batch):
        ids = torch.as_tensor(s.completion)
        theirs = sampler_logp.get(logprob_key(adapter, s.prompt, ids))
        if theirs is not None and len(theirs) == len(ids):
            logps[row, : len(ids)], recorded[row, : len(ids)] = theirs.float(), 1.0
    return logps, recorded


def gap_sums(logp: torch.Tensor, sampler: torch.Tensor, recorded: torch.Tensor) -> Sums:
    """The |sampler - trainer| log-prob sum over the tokens the sampler recorded, and their count. All [K, Lc]."""
    tokens = float(recorded.sum())
    return Sums(gap=float(logprob_gap(sampler, logp.float().cpu(), recorded)) * tokens, gap_tokens=tokens)


def _sum_over_ranks(sums: dict[str, Sums]) -> dict[str, Sums]:
    """Each agent's token counts and loss sums added over ranks, so the means cover every rank's samples (the
    sampler's gap and weights stay this rank's)."""
    if distributed.world_size() == 1:
        return sums
    agents = sorted(sums)
    totals = distributed.all_reduce_sum([[getattr(sums[a], k) for k in RANK_SUMMED] for a in agents])  # [A, 6]
    out = {}
    for agent, row in zip(agents, totals.tolist(), strict=True):
        added = {k: int(v) if k.endswith("tokens") else v for k, v in zip(RANK_SUMMED, row, strict=True)}
        out[agent] = dataclasses.replace(sums[agent], **added)
    return out


def batch_loss(
    team: Team,
    settings: UpdateSettings,
    agent: str,
    batch: list[Sample],
    advantages: Sequence[float],
    old_logp: torch.Tensor | None = None,
    sampler: tuple[torch.Tensor, torch.Tensor] | None = None,
    prefix: PromptPrefix | None = None,
) -> tuple[torch.Tensor, torch.Tensor, Sums]:
    """Token-summed PPO-clip (+ KL) loss of one prompt's K completions with their K `advantages`, their log-probs
    (detached), and the group's sums of the loss, KL, entropy, clipped tokens and importance weights.

    `old_logp` [K, Lc]: the sampling policy's log-probs; None means this pass runs at the sampling
    policy (the first pass), so the ratio is 1 and the loss is the plain policy gradient.
    `sampler` (`sampler_rows`): the sampler's own log-probs and the mask of the tokens it recorded; with
    `settings.tis_cap`, each token's policy-gradient term (not the KL) is multiplied by its detached weight
    min(exp(old_logp - sampler log-prob), tis_cap), 1 on tokens the sampler did not record.
    `prefix` (`run_prefix`): the leading prompt tokens the adapter's groups share, already run; the caller calls its
    `backward` after every group's.
    """
    cut = settings.truncation()  # the distribution sampled from
    model = team.activate(agent)
    tokenizer = team.tokenizer_of(agent)
    prompt = torch.tensor(batch[0].prompt)  # [Lp]
    ids, mask = pad([s.completion for s in batch], tokenizer.pad_token_id)  # [K, Lc]
    mask, adv = mask.to(model.device), torch.tensor(advantages, dtype=torch.float32, device=model.device)  # [K]
    logp, entropy = group_logprobs(model, prompt, ids, settings.temperature, shared_prompt=True, prefix=prefix, **cut)
    first = old_logp is None
    old_logp = logp.detach() if first else old_logp
    per_token, clipped = ppo_clip_loss(logp, old_logp, adv, settings.clip_eps, settings.clip_eps_high)
    tis = {}
    if settings.tis_cap is not None and sampler is not None:  # weights from the first pass's log-probs, alike every pass
        weights = recorded_is_weights(old_logp, *(t.to(model.device) for t in sampler), settings.tis_cap)  # [K, Lc]
        per_token = per_token * weights
        if first:
            tis = {"tis": float(masked_sum(weights, mask)), "tis_tokens": float(mask.sum())}
    kl_sum = 0.0
    if settings.kl_coef > 0:
        with torch.no_grad(), model.disable_adapter():
            ref_logp, _ = group_logprobs(model, prompt, ids, settings.temperature, shared_prompt=True, **cut)
        kl = k3_kl(logp, ref_logp)
        per_token = per_token + settings.kl_coef * kl
        kl_sum = float(masked_sum(kl.detach(), mask))
    loss = masked_sum(per_token, mask)
    part = Sums(
        loss=float(loss.detach()),
        kl=kl_sum,
        entropy=float(masked_sum(entropy, mask)),
        clip=float(masked_sum(clipped.float(), mask)),
        **tis,
    )
    return loss, logp.detach(), part
