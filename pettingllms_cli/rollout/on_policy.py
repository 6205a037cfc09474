"""On-policy episodes: what the policy does on its own, one sample per action, measured beside the tree's
best-of-K episodes (docs/metrics.md). They are logged, not trained.
"""

from __future__ import annotations

import torch

from pettingllms_cli.envs.base import TurnEnv
from pettingllms_cli.policy.sampler import Sampler
from pettingllms_cli.policy.sampling import base_seed, row_seed
from pettingllms_cli.rollout.act import Acting, act, declare_intents
from pettingllms_cli.rollout.coordination import Play
from pettingllms_cli.rollout.episodes import Episode, record
from pettingllms_cli.rollout.records import Rollout, Sample
from pettingllms_cli.rollout.settings import RolloutSettings


def _first_candidates(tree: Rollout) -> dict[tuple, Sample]:
    """Each (problem, role, turn) group's first candidate: itself a plain sample of the policy in that state."""
    first: dict[tuple, Sample] = {}
    for s in tree.samples:
        first.setdefault((s.problem_id, s.role, s.turn), s)
    return first


def on_policy_episodes(
    sampler: Sampler, settings: RolloutSettings, envs: list[TurnEnv], tree: Rollout, greedy: bool = False
) -> tuple[list[Episode], int]:
    """One episode per env (fresh, unstepped) played by the policy itself, reusing the tree's draws where it can.

    The tree's episode keeps the best of K candidates at every action, so its success is best-of-K,
    not what the policy does. Here each env is played with one sample per action: while the episode
    is in a state the tree sampled from (same prompt, same problem, role and turn), it takes that
    group's first candidate, itself a plain sample of the policy there; once it leaves the tree's
    path it samples its own action (seeded per problem, role and turn). A one-role, one-turn episode
    costs nothing extra; otherwise only the actions off the tree's path are generated. Returns the
    episodes and the tokens generated for them. Under the intent protocol every intent is sampled anew.
    """
    first = _first_candidates(tree)
    episodes, tokens = [Play(env.copy()) for env in envs], 0
    with torch.random.fork_rng():  # the step's RNG stream is left as the tree left it
        ctx = Acting(sampler=sampler, settings=settings, greedy=greedy, base=base_seed())
    for turn in range(settings.max_turns):
        keys = [(ctx.base, play.env.problem.id, "on_policy") for play in episodes]
        _, declaring = declare_intents(ctx, episodes, tree.assignment, keys, turn)
        tokens += declaring.tokens
        for role in envs[0].roles if envs else ():
            active = [i for i, play in enumerate(episodes) if not play.done]
            observations = {i: episodes[i].view(role) for i in active}
            agents = {i: tree.assignment[i][role] for i in active}
            texts: dict[int, str | None] = {}
            for i in active:
                hit = first.get((episodes[i].env.problem.id, role, turn))
                reusable = hit is not None and hit.prompt == sampler.encode(agents[i], observations[i])
                texts[i] = hit.text if reusable else None  # the tree sampled this very state
            fresh = [i for i in active if texts[i] is None]
            if fresh:
                seeds = [row_seed(ctx.base, episodes[i].env.problem.id, role, turn, "on_policy") for i in fresh]
                acted, spent = act(ctx, [observations[i] for i in fresh], [agents[i] for i in fresh], 1, seeds)
                tokens += spent
                texts |= {i: one.candidates[0][0] for i, one in zip(fresh, acted, strict=True)}
            for i in active:
                episodes[i].step(role, texts[i])
    return [record(play) for play in episodes], tokens
