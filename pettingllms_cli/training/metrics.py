"""Team-learning metrics added to each metrics.jsonl line: reward components, role assignment, memory, distillation."""

from __future__ import annotations

import resource
import sys

import torch

from pettingllms_cli.jsonio import clean_metrics
from pettingllms_cli.policy.adapters import Team
from pettingllms_cli.rollout.roles import RoleAssigner
from pettingllms_cli.rollout.tree import Rollout


def team_metrics(team: Team, roles: RoleAssigner, rollout: Rollout, distilled: dict[str, float]) -> dict:
    """`reward_env_local/<agent>`, `roles` (each episode's assignment and success), `role_success/...`, memory, distillation."""
    metrics: dict = {}
    for agent in sorted(team.spec.agents):
        own = [s.env_local_reward for s in rollout.samples if s.agent == agent]
        metrics[f"reward_env_local/{agent}"] = sum(own) / len(own) if own else 0.0
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
