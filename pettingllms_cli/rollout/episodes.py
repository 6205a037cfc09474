"""The envs a batch of problems is played in, the `Episode` record a rollout hands back for each, and the
episode metrics training and evaluation share.

A rollout returns records, not live envs: they are what is gathered across ranks, logged and
reported, and they carry no env internals (turn cursor, tools, databases).
"""

from __future__ import annotations

from dataclasses import dataclass

from pettingllms_cli.envs import ENVS, Problem, TurnEnv
from pettingllms_cli.rollout.coordination import Play
from pettingllms_cli.rollout.settings import RolloutSettings


@dataclass(frozen=True, kw_only=True)
class Episode:
    """What one played episode did."""

    id: str  # the problem's id
    question: str  # ids repeat across seeds and files; the content says what was played
    success: bool  # the team solved the problem within `max_turns`
    attempts: int | None  # attempts up to the one that solved it; None when unsolved (envs/base.py)
    turns: int  # rounds played, an unfinished one counted
    transcript: list[dict]  # every action with what the env made of it
    intent_checks: list[bool]  # per action taken after an intent: did it agree? (coordination)
    state: dict  # the env's `state()` at the end with the intent checks, as reports show it

    @property
    def intent_agreement(self) -> float | None:
        """Share of the actions taken after an intent that agreed with it; None when no intent was declared."""
        return sum(self.intent_checks) / len(self.intent_checks) if self.intent_checks else None


def record(play: Play) -> Episode:
    """The record of an episode: its env, and the intent protocol's checks (rollout/coordination.py)."""
    env = play.env
    turns = min(env.turn + (env.next_role > 0), env.max_turns)
    transcript = play.transcript()
    state = {key: value for key, value in env.state().items() if key != "transcript"}
    state |= {"intent_agreement": play.intent_agreement, "transcript": transcript}
    return Episode(
        id=env.problem.id, question=env.problem.question, success=bool(env.success), attempts=env.attempts, turns=turns,
        transcript=transcript, intent_checks=play.intent_checks, state=state,
    )  # fmt: skip


def make_envs(settings: RolloutSettings, problems: list[Problem]) -> list[TurnEnv]:
    env_cls = ENVS[settings.env]
    return [env_cls(p, settings.layout, settings.max_turns, settings.env_options) for p in problems]


def episode_metrics(episodes: list[Episode]) -> dict[str, float | None]:
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
        "mean_turns": sum(e.turns for e in episodes) / n,
    }
    checks = [agreed for e in episodes for agreed in e.intent_checks]
    if checks:
        metrics["intent_agreement"] = sum(checks) / len(checks)
    return metrics
