"""The envs a batch of problems is played in, and the episode metrics training and evaluation share."""

from __future__ import annotations

from pettingllms_cli.envs import ENVS, Problem, TurnEnv
from pettingllms_cli.spec import Experiment


def make_envs(spec: Experiment, problems: list[Problem]) -> list[TurnEnv]:
    env_cls = ENVS[spec.env.name]
    return [env_cls(p, spec.env.layout, spec.env.max_turns, spec.env.options) for p in problems]


def episode_metrics(episodes: list[TurnEnv]) -> dict[str, float | None]:
    """Success, attempts and turns; with the intent protocol, `intent_agreement` over all actions taken after an intent.

    `team_success_rate` is the share solved within the budget (`max_turns`); `mean_attempts_to_success`
    averages over the solved episodes only (None when none was solved), so unsolved episodes are
    never folded in as if solved at the last attempt (docs/metrics.md).
    """
    n = max(len(episodes), 1)
    solved = [e.attempts for e in episodes if e.success and e.attempts is not None]
    metrics = {
        "team_success_rate": sum(e.success for e in episodes) / n,
        "mean_attempts_to_success": sum(solved) / len(solved) if solved else None,
        "solved_episodes": len(solved),
        "mean_turns": sum(min(e.turn + (e.next_role > 0), e.max_turns) for e in episodes) / n,
    }
    checks = [agreed for e in episodes for agreed in e.intent_checks]
    if checks:
        metrics["intent_agreement"] = sum(checks) / len(checks)
    return metrics
