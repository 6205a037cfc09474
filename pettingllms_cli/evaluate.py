"""Score the team on fixed problems: one episode per problem, greedy by default."""

from __future__ import annotations

import time

import torch

from pettingllms_cli.envs import ENVS, Problem, TurnEnv
from pettingllms_cli.policy import Team
from pettingllms_cli.rollout import tree_rollout
from pettingllms_cli.spec import Experiment


def make_envs(spec: Experiment, problems: list[Problem]) -> list[TurnEnv]:
    env_cls = ENVS[spec.env.name]
    return [env_cls(p, spec.env.layout, spec.env.max_turns, spec.env.options) for p in problems]


def episode_metrics(episodes: list[TurnEnv]) -> dict[str, float]:
    n = max(len(episodes), 1)
    return {
        "team_success_rate": sum(e.success for e in episodes) / n,
        "mean_attempts_to_success": sum(e.attempts for e in episodes) / n,
        "mean_turns": sum(min(e.turn + (e.next_role > 0), e.max_turns) for e in episodes) / n,
    }


def evaluate(team: Team, spec: Experiment, problems: list[Problem], batch_size: int = 16) -> dict:
    """Greedy episodes on `problems`, batched; returns success, attempts, tokens and seconds."""
    start = time.perf_counter()
    episodes: list[TurnEnv] = []
    tokens = 0
    with torch.random.fork_rng():
        for i in range(0, len(problems), batch_size):
            rollout = tree_rollout(team, spec, make_envs(spec, problems[i : i + batch_size]), k=1, greedy=True)
            episodes += rollout.episodes
            tokens += rollout.tokens
    return {
        **episode_metrics(episodes),
        "episodes": len(episodes),
        "tokens_generated": tokens,
        "seconds": round(time.perf_counter() - start, 3),
        "transcripts": [e.state() for e in episodes[:3]],
    }
