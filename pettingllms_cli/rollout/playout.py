"""Play-outs: the team reward a branch reaches at the end of its turn, when one sample of each later role plays it
on (credit.py has the design and its token cost). Play-outs are scored, not trained.
"""

from __future__ import annotations

from collections.abc import Callable

from pettingllms_cli.envs.base import StepResult
from pettingllms_cli.rollout.act import Acting, Cost, act
from pettingllms_cli.rollout.coordination import Play
from pettingllms_cli.rollout.roles import Assignment


def stepped(play: Play, role: str, text: str) -> tuple[Play, StepResult]:
    """A copy of the episode after `role` plays `text`, and that step's result (`play` itself is untouched)."""
    branch = play.copy()
    return branch, branch.step(role, text)


def playout(
    ctx: Acting,
    starts: list[tuple[Play, StepResult]],
    agents_of: list[Assignment],
    seed_of: Callable[[int, str], int],
    later: tuple[str, ...],
) -> tuple[list[float], list[bool], Cost]:
    """The team reward each start (a branch and the result of its last step) has at the end of its turn, whether
    the team had solved the problem by then, and what playing on cost.

    Each start is played on, on a copy, by one sample of each of the `later` roles of the turn; every
    start's action of one role comes from one batched generate. Start j's draws for `role` come from
    `seed_of(j, role)`: starts of one problem share it, so their outcomes differ only through their state.
    """
    outcome = [res.team_reward for _, res in starts]
    probes = [play.copy() for play, _ in starts] if later else [play for play, _ in starts]
    cost = Cost()
    for role in later:
        live = [j for j, probe in enumerate(probes) if not probe.done]
        if not live:
            break
        observations = [probes[j].view(role) for j in live]
        agents = [agents_of[j][role] for j in live]
        acted, tokens = act(ctx, observations, agents, 1, [seed_of(j, role) for j in live])
        cost += Cost(tokens=tokens, playout_tokens=tokens, playout_actions=len(live))
        for j, one in zip(live, acted, strict=True):
            outcome[j] = probes[j].step(role, one.candidates[0][0]).team_reward
    return outcome, [probe.env.success for probe in probes], cost
