"""Hierarchical reward (DESIGN.md §5): r = team_weight * R_team + local_weight * r_local.

With `credit: difference` the local term is a counterfactual: the team reward after the
agent's action minus the team reward after a no-op (the empty action) in the same state, so
an action that does not change the team outcome earns no local reward.
"""

from __future__ import annotations

from pettingllms_cli.envs.base import StepResult, TurnEnv
from pettingllms_cli.spec import Experiment

NOOP = ""  # the default action: every env scores it as a valid but useless action


def noop_team_reward(spec: Experiment, env: TurnEnv, role: str) -> float | None:
    """The team reward a no-op would get here (on a copy), or None when credit is not `difference`."""
    if spec.reward.credit != "difference":
        return None
    return env.copy().step(role, NOOP).team_reward


def local_term(res: StepResult, noop_team: float | None) -> float:
    """The local reward credited to an action: the env's own, or its difference to the no-op.

    >>> local_term(StepResult(0.1, 1.0, True, False), None)
    0.1
    >>> local_term(StepResult(0.1, 1.0, True, False), 1.0)
    0.0
    """
    return res.local_reward if noop_team is None else res.team_reward - noop_team


def combine(spec: Experiment, team_reward: float, local_reward: float) -> float:
    """r = team_weight * R_team + local_weight * r_local."""
    return spec.reward.team_weight * team_reward + spec.reward.local_weight * local_reward
