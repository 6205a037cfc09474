"""One metrics.jsonl line per step (docs/metrics.md): success and rewards (`step_metrics`), what the step spent,
the held-out curve, and the team's reward parts, role assignment, memory and distillation (`team_metrics`)."""

from __future__ import annotations

import resource
import sys
from collections import defaultdict

import torch

from pettingllms_cli.algorithms.grpo import zero_std_groups
from pettingllms_cli.algorithms.stats import AgentStats
from pettingllms_cli.analysis.evaluate import evaluate
from pettingllms_cli.analysis.stats import mean
from pettingllms_cli.envs import Problem
from pettingllms_cli.jsonio import clean_metrics
from pettingllms_cli.policy.adapters import Team
from pettingllms_cli.rollout.episodes import episode_metrics
from pettingllms_cli.rollout.records import Rollout, Sample
from pettingllms_cli.rollout.roles import RoleAssigner
from pettingllms_cli.spec import Experiment


def team_metrics(team: Team, roles: RoleAssigner, rollout: Rollout, distilled: dict[str, float]) -> dict:
    """`reward_env_local/<agent>`, `due_approve_frac/<judge>`, `roles` (each episode's assignment and success),
    `role_success/...`, memory, distillation."""
    metrics: dict = {}
    for agent in sorted(team.spec.agents):
        own = [s.env_local_reward for s in rollout.samples if s.agent == agent]
        metrics[f"reward_env_local/{agent}"] = sum(own) / len(own) if own else 0.0
        due = [s.verdict_due for s in rollout.samples if s.agent == agent and s.verdict_due is not None]
        if due:  # a judge: the share of its judged actions this step that called for approval (balance_verdicts evens them)
            metrics[f"due_approve_frac/{agent}"] = sum(due) / len(due)
    played = rollout.on_policy or rollout.episodes  # success on-policy (docs/metrics.md), as adaptive roles learn it
    metrics["roles"] = [
        {"problem": e.id, "roles": dict(assignment), "success": e.success}
        for assignment, e in zip(rollout.assignment, played, strict=True)
    ]
    metrics.update(roles.metrics())
    metrics.update(team.memory_mb())
    metrics["peak_rss_mb"] = peak_rss_mb()
    if torch.cuda.is_available():
        metrics["cuda_peak_mb"] = torch.cuda.max_memory_allocated() / 2**20
    metrics.update(distilled)
    return clean_metrics(metrics)  # a NaN distill_loss is null, like every other metric


def peak_rss_mb() -> float:
    """Peak resident memory of this process (ru_maxrss is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (2**20 if sys.platform == "darwin" else 2**10)


def step_metrics(spec: Experiment, step: int, rollout: Rollout, stats: dict[str, AgentStats], seconds: float) -> dict:
    """One metrics.jsonl line (the keys are in docs/metrics.md); a non-finite value is written as null."""
    played = rollout.on_policy or rollout.episodes  # the policy's own episodes (docs/metrics.md)
    metrics: dict = {"step": step, "episodes": len(played), **episode_metrics(played)}
    if spec.algorithm.rollout == "tree":  # the episode AT-GRPO continued: best of K at every action
        metrics["best_branch_success_rate"] = mean([e.success for e in rollout.episodes], empty=0.0)
    # What it counts: sampled actions right after which the team reward was > 0 (partial credit included).
    metrics["sample_team_reward_rate"] = mean([s.team_reward > 0 for s in rollout.samples], empty=0.0)
    by_agent: dict[str, list[Sample]] = defaultdict(list)
    for s in rollout.samples:
        by_agent[s.agent].append(s)
    flat = zero_std_groups(torch.tensor([s.reward for s in rollout.samples]), [s.group for s in rollout.samples])
    for agent in sorted(spec.agents):
        own = by_agent.get(agent, [])
        groups = {s.group for s in own}
        st = stats[agent]
        metrics[f"reward/{agent}"] = mean([s.reward for s in own], empty=0.0)
        metrics[f"reward_team/{agent}"] = mean([s.team_reward for s in own], empty=0.0)
        metrics[f"reward_local/{agent}"] = mean([s.local_reward for s in own], empty=0.0)
        metrics[f"loss/{agent}"] = st.loss
        metrics[f"kl/{agent}"] = st.kl
        metrics[f"entropy/{agent}"] = st.entropy
        metrics[f"clip_frac/{agent}"] = st.clip_frac
        metrics[f"grad_norm/{agent}"] = st.grad_norm
        metrics[f"zero_std_frac/{agent}"] = len(groups & flat) / len(groups) if groups else 0.0
        metrics[f"skipped_updates/{agent}"] = int(st.skipped)
        if st.logprob_gap is not None:  # a sampler's own log-probs came with the samples (`sampler: vllm`)
            metrics[f"sampler_logprob_gap/{agent}"] = st.logprob_gap
        if st.tis_weight is not None:  # and `algorithm.tis_cap` weighted the loss with them
            metrics[f"tis_weight/{agent}"] = st.tis_weight
        if st.lr is not None:  # a learning-rate schedule moves it (algorithm.lr_scheduler_type, warmup)
            metrics[f"lr/{agent}"] = st.lr
    metrics["tokens_generated"] = rollout.tokens
    metrics["on_policy_tokens"] = rollout.on_policy_tokens
    metrics |= compute_metrics(spec, rollout, stats)
    metrics["tokens_per_second"] = rollout.tokens / seconds if seconds > 0 else 0.0
    metrics["sampling_tokens_per_second"] = rollout.tokens / rollout.seconds if rollout.seconds > 0 else 0.0
    metrics["seconds"] = round(seconds, 3)
    metrics["on_policy_seconds"] = round(rollout.on_policy_seconds, 3)  # measurement: the policy's own episodes (tree)
    metrics["training_seconds"] = round(max(0.0, seconds - rollout.on_policy_seconds), 3)  # the step without them
    return clean_metrics(metrics)


def compute_metrics(spec: Experiment, rollout: Rollout, stats: dict[str, AgentStats]) -> dict:
    """What the step spent, as `compare` reports it per arm (docs/metrics.md).

    An adapter whose every group tied (all advantages 0, `kl_coef` 0) gets no gradient and keeps its weights: it
    counts in `optimizer_steps` (it had samples) but not in `effective_optimizer_steps`, and its tokens are not
    `trained_tokens`.
    """
    stepped = {a: st for a, st in stats.items() if st.tokens > 0 and not st.skipped}
    moved = defaultdict(int)  # adapter -> tokens with a gradient, summed over its agents
    for agent, st in stepped.items():
        moved[spec.adapter_of(agent)] += st.trained_tokens
    sampled, intents = len(rollout.samples), rollout.intent_actions
    return {
        "sampled_actions": sampled,  # candidates in the step's groups (not play-outs, not intents)
        "playout_actions": rollout.playout_actions,  # sampled to score candidates at the turn's end (credit.py)
        "intent_actions": intents,  # intents declared (coordination.protocol: intent), trained or not
        "actions_total": sampled + rollout.playout_actions + intents,
        "trained_tokens": sum(st.trained_tokens for st in stepped.values()),  # completion tokens whose loss had a gradient
        "optimizer_steps": len({spec.adapter_of(a) for a in stepped}),  # adapters that took an optimizer step
        "effective_optimizer_steps": sum(1 for tokens in moved.values() if tokens > 0),  # ... that changed its weights
    }


BUDGET_TOTALS = {"stop_at_actions": "actions_total", "stop_at_tokens": "tokens_generated"}  # TrainSpec field -> row key


def running_totals(rows: list[dict]) -> dict[str, int]:
    """What the run has spent so far, summed over its metrics rows, in the units `train.stop_at_*` counts.

    >>> running_totals([{"actions_total": 12, "tokens_generated": 40}, {"actions_total": 36, "tokens_generated": 90}])
    {'actions_total': 48, 'tokens_generated': 130}
    """
    return {key: sum(int(r.get(key) or 0) for r in rows) for key in BUDGET_TOTALS.values()}


def budget_reached(spec: Experiment, totals: dict[str, int]) -> bool:
    """Has the run spent its `train.stop_at_actions` / `stop_at_tokens`? (Never, when neither is set.)"""
    limits = {key: getattr(spec.train, field) for field, key in BUDGET_TOTALS.items()}
    return any(limit is not None and totals[key] >= limit for key, limit in limits.items())


def heldout_metrics(team: Team, roles: RoleAssigner, spec: Experiment, eval_problems: list[Problem], step: int) -> dict:
    """At every `train.eval_every`-th step: greedy success on the first `eval_subset` held-out problems (a fixed set).

    This curve, not training success, is what `compare` reads convergence from (docs/metrics.md).
    """
    every = spec.train.eval_every
    if every is None or step % every:
        return {}
    subset = eval_problems[: spec.train.eval_subset]
    scored = evaluate(team, spec, subset, n_transcripts=0, score_actions=False, assignment=roles.best())
    return {
        "heldout_success_rate": scored["team_success_rate"],
        "heldout_mean_attempts_to_success": scored["mean_attempts_to_success"],
        "heldout_episodes": scored["episodes"],
        "heldout_seconds": scored["seconds"],
    }
