"""The rollout's entry points: `rollout` plays a batch of envs the way the settings say (the user's program for
the `external` env, else `tree` or `parallel`); `collect` is a training step's rollout, timed, with the
policy's own episodes beside the tree's best-of-K ones.
"""

from __future__ import annotations

import time
from dataclasses import replace

from pettingllms_cli.envs import Problem, TurnEnv
from pettingllms_cli.policy.sampler import Sampler
from pettingllms_cli.policy.sampling import base_seed
from pettingllms_cli.rollout.act import Acting
from pettingllms_cli.rollout.episodes import make_envs
from pettingllms_cli.rollout.external import external_rollout
from pettingllms_cli.rollout.on_policy import on_policy_episodes
from pettingllms_cli.rollout.parallel import parallel_rollout
from pettingllms_cli.rollout.records import Rollout
from pettingllms_cli.rollout.roles import Assignment
from pettingllms_cli.rollout.settings import RolloutSettings
from pettingllms_cli.rollout.tree import tree_rollout


def rollout(
    sampler: Sampler,
    settings: RolloutSettings,
    envs: list[TurnEnv],
    k: int,
    greedy: bool = False,
    assignment: list[Assignment] | None = None,
) -> Rollout:
    """K samples per (problem, role, turn) under `tree`, K episodes per problem under `parallel` or `external`.

    `assignment`: each env's role -> agent map (the static one by default). k=1 with `greedy` is a plain
    greedy episode per env, as evaluation plays it.
    """
    if not envs:  # a rank whose shard of the step is empty (fewer problems than ranks)
        return Rollout(assignment=[])
    assignment = assignment or [settings.owners() for _ in envs]
    if settings.env == "external":  # the user's program plays: K episodes of it per problem (external.py)
        return external_rollout(sampler, settings, envs, k, greedy, assignment)
    ctx = Acting(sampler=sampler, settings=settings, greedy=greedy, base=base_seed())  # base: alike on every rank
    if settings.kind == "tree":
        return tree_rollout(ctx, envs, k, assignment)
    return parallel_rollout(ctx, envs, k, assignment)


def collect(
    sampler: Sampler, settings: RolloutSettings, problems: list[Problem], assignment: list[Assignment] | None = None
) -> Rollout:
    """A training step's rollout of this rank's problems, with the policy's own episodes (`Rollout.on_policy`)."""
    started = time.perf_counter()
    sampled = rollout(sampler, settings, make_envs(settings, problems), settings.group_size, assignment=assignment)
    seconds = time.perf_counter() - started
    if settings.kind != "tree" or settings.env == "external":  # every episode is already the policy's own
        return replace(sampled, seconds=seconds, on_policy=sampled.episodes)
    measuring = time.perf_counter()  # the tree's episodes are best-of-K: measure the policy on its own path
    on_policy, tokens = on_policy_episodes(sampler, settings, make_envs(settings, problems), sampled)
    return replace(
        sampled, seconds=seconds, on_policy=on_policy, on_policy_tokens=tokens, on_policy_seconds=time.perf_counter() - measuring
    )
