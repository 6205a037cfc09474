"""Hierarchical reward (docs/design.md, docs/credit.md): r = team_weight * R_team + local_weight * r_local.

R_team of an action is the team outcome the action leads to. For a role the env lists in
`deferred_roles` (`reward.team_signal: deferred`, the default), or for every role but the turn's
last (`turn_end`), that is the team reward at the end of the action's turn: under `tree`
rollouts each of the K candidates' branches is played on, on a copy, to the end of the turn with
one sample per later role (playout.py), batched over every candidate of every problem
in one generate per later role. The play-outs of one problem share their seeds (common random
numbers), so two candidates' outcomes differ only through what each candidate changed. A planner
or a tester, whose action cannot move the team reward until a later role acts, so gets a team
signal that tells its K candidates apart. Other roles already move the team reward themselves (a
math caller's calculator result is right or not), so `deferred` keeps their team reward right after
the action: a dense signal that does not wait on an untrained later role's one sample. `immediate`
never plays on (no extra samples; for deferred roles it is the same stale value for all K).

With `credit: difference` the local term is a counterfactual: R_team of the action minus R_team of a
no-op (the empty action) in the same state, the no-op played on with the same continuation (same
later roles, same seeds). An action that does not change the team outcome earns no local reward.

Cost in sampled tokens, per problem and turn, with R roles in the turn, K = group_size and at
most `max_new_tokens` per action: tree sampling itself samples R*K actions; a role at position i
(0-based) that is played on adds K*(R-1-i) (one action per later role for each candidate), plus
R-1-i for the no-op's play-out under `difference`. `turn_end`: K*R(R-1)/2 (+ R(R-1)/2) in all.
`deferred` on the built-in envs (each env class declares its `deferred_roles`; docs/credit.md lists
them, checked by tests/test_one_home.py): a 2-role layout whose first role is deferred (`code_v0`
tester, `function_call_v0` and `function_select_v0` first roles) samples K more (3K instead of 2K,
x1.5, + 1 under `difference`); the `team` layouts' planner and validator, deferred before the reader,
2K + K more (6K instead of 3K, x2); envs without deferred roles nothing. One role, or K = 1 (evaluation):
nothing. Those actions count in `tokens_generated` (and `Rollout.playout_tokens`,
`Rollout.playout_actions`) and are not trained: one sample per
candidate is not a group. Envs that score by running code (code_v0) also run the sandbox once per
play-out.

Under `parallel` rollouts the team term is the episode's final success already; with `difference`
the no-op of a played-on role is played on to the turn's end with the seeds of the episode's own
later actions (R-1-i extra actions per episode and turn for the role at position i) and compared
with the team reward the episode itself had at that turn's end.

Not chosen: returning the chosen branch's later outcome (discounted) to the earlier roles. Only the
chosen candidate has a later outcome, so it cannot tell the K candidates of a group apart.
"""

from __future__ import annotations

from pettingllms_cli.envs.base import TurnEnv
from pettingllms_cli.rollout.settings import RewardSettings

NOOP = ""  # the default action: every env scores it as a valid but useless action


def plays_on(reward: RewardSettings, k: int, role: str, env: TurnEnv) -> bool:
    """Whether `role`'s candidates get their team term by playing their branch on to the end of the turn.

    A single candidate (k = 1: evaluation) has nothing to compare with, so it is not played on.
    """
    signal = reward.team_signal
    return k > 1 and (signal == "turn_end" or (signal == "deferred" and role in type(env).deferred_roles))


def local_term(env_local: float, team: float, noop_team: float | None) -> float:
    """The local reward credited to an action: the env's own, or its team outcome minus the no-op's.

    >>> local_term(0.1, 1.0, None)
    0.1
    >>> local_term(0.1, 1.0, 0.0), local_term(0.1, 1.0, 1.0)
    (1.0, 0.0)
    """
    return env_local if noop_team is None else team - noop_team


def combine(reward: RewardSettings, team_reward: float, local_reward: float) -> float:
    """r = team_weight * R_team + local_weight * r_local."""
    return reward.team_weight * team_reward + reward.local_weight * local_reward
