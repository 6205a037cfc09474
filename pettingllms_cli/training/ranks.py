"""Data parallelism at the edges of a step: where a step splits its problems over ranks, and the few named points
where ranks add up what they did (distributed.py does the collectives). In one process each is the identity.

A step runs: `stopped_anywhere` -> `shard_problems` -> rollout -> advantages (`sum_tally`, `batch_spread`) -> update (its gradient
all-reduce is the update's own, algorithms/update.py) -> `reduce_step` -> log -> checkpoint (`ranks_adapters_sha`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import torch

from pettingllms_cli import distributed
from pettingllms_cli.algorithms.grpo import batch_std
from pettingllms_cli.envs import Problem
from pettingllms_cli.envs.verdicts import Tally
from pettingllms_cli.policy.adapters import Team
from pettingllms_cli.rollout.records import Rollout
from pettingllms_cli.rollout.roles import Assignment
from pettingllms_cli.training.graceful import GracefulStop


def stopped_anywhere(stop: GracefulStop) -> bool:
    """Reduce: a stop signal reached any rank (every rank then stops at the same step)."""
    return distributed.any_rank(bool(stop.requested))


def shard_problems(problems: list[Problem], assignment: list[Assignment]) -> tuple[list[Problem], list[Assignment]]:
    """Split: this rank's contiguous share of the step's problems, with their role assignments."""
    return distributed.shard(problems), distributed.shard(assignment)


def sum_tally(step: Tally, agents: Sequence[str]) -> Tally:
    """Reduce: this step's judges' tallies (envs/verdicts.py) added over ranks, every agent in sorted order."""
    agents = sorted(agents)  # the same order on every rank
    counts = distributed.all_reduce_sum([n for a in agents for n in step.get(a, [0, 0])]).tolist()
    return {agent: [int(counts[2 * i]), int(counts[2 * i + 1])] for i, agent in enumerate(agents)}


def batch_spread(rewards: torch.Tensor) -> float:
    """Reduce: the std of every rank's rewards of the step (`algorithm.scale_rewards: batch`), alike on every rank."""
    return batch_std(*distributed.all_reduce_sum([len(rewards), rewards.sum(), (rewards**2).sum()]).tolist())


def reduce_step(rollout: Rollout) -> Rollout:
    """Reduce: every rank's share of the step in rank order, so metrics, roles and distillation see the whole step."""
    return distributed.gather_fields(rollout)


def adapters_sha(team: Team) -> str:
    """SHA-256 of every adapter's weights: data-parallel ranks must hold identical adapters."""
    h = hashlib.sha256()
    for adapter, params in sorted(team.params.items()):
        h.update(adapter.encode())
        for p in params:
            h.update(p.detach().float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def ranks_adapters_sha(team: Team) -> list[str]:
    """Reduce: each rank's `adapters_sha`, in rank order (a checkpoint records them: they must all be equal)."""
    return distributed.gather([adapters_sha(team)])
