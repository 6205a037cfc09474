"""`tree` rollouts (AT-GRPO): at each (turn, role), K candidates per env, each stepped on a copy of the env; the K
share one prompt and form the group (problem, role, turn); the episode continues from the best branch.

Roles act in turn order, so role i+1 sees role i's chosen action. The candidates of a role whose effect comes
later (`deferred_roles`; every role under `reward.team_signal: turn_end`) get the team reward their branch
reaches at the end of the turn, when one sample per later role plays it on (playout.py; credit.py has the
design and its token cost); the play-outs are scored, not trained, and the groups stay (problem, role, turn).
Each episode has its own role -> agent assignment (roles.py); the default is the static one.

Each episode is played as a `Play` (coordination.py): its env with the intent protocol's state. With
`coordination.protocol: intent`, each turn opens with an intent round (act.py `declare_intents`): every role
declares, in turn order, one sample per episode, before any role acts. Under `tree` the declarations condition
the turn's groups but are not trained (one intent per episode and turn gives a group of one, with no signal).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict

from pettingllms_cli.envs.base import TurnEnv
from pettingllms_cli.policy.sampling import row_seed
from pettingllms_cli.rollout.act import Acting, Cost, Node, Seat, act, credited_local, declare_intents, make_sample
from pettingllms_cli.rollout.coordination import Play
from pettingllms_cli.rollout.credit import NOOP, combine, plays_on
from pettingllms_cli.rollout.episodes import record
from pettingllms_cli.rollout.playout import playout, stepped
from pettingllms_cli.rollout.records import Rollout, Sample
from pettingllms_cli.rollout.roles import Assignment


def _playout_seeds(base: int, problem_ids: list[str], node: Node) -> Callable[[int, str], int]:
    """Seeds of the play-outs after a role's candidates: one per (problem, later role), shared by its candidates
    and no-op."""
    # "play_out" is part of the seed: renaming it would change every play-out's draws
    return lambda j, later: row_seed(base, problem_ids[j], node.role, node.turn, "play_out", later)


def _tree_step(ctx: Acting, plays: list[Play], assignment: list[Assignment], node: Node) -> tuple[list[Sample], Cost]:
    """One (turn, role) of tree sampling: K candidates per unfinished episode, each scored by the team outcome its
    branch reaches (played on by the `later` roles); each episode in `plays` is replaced by its best branch."""
    settings, role, turn = ctx.settings, node.role, node.turn
    active = [i for i, play in enumerate(plays) if not play.done]
    observations = [plays[i].view(role) for i in active]
    agents = [assignment[i][role] for i in active]
    seeds = [row_seed(ctx.base, plays[i].env.problem.id, role, turn) for i in active]
    acted, tokens = act(ctx, observations, agents, node.k, seeds)
    branches = [[stepped(plays[i], role, text) for text, _ in one.candidates] for i, one in zip(active, acted, strict=True)]
    noops = [stepped(plays[i], role, NOOP) for i in active] if settings.reward.credit == "difference" else []
    starts = [b for per_env in branches for b in per_env] + noops  # every candidate of every episode, then the no-ops
    owner = [i for i, per_env in zip(active, branches, strict=True) for _ in per_env] + (active if noops else [])
    seed_of = _playout_seeds(ctx.base, [plays[i].env.problem.id for i in owner], node)
    outcome, solved, cost = playout(ctx, starts, [assignment[i] for i in owner], seed_of, node.later)
    noop_of = dict(zip(active, outcome[len(outcome) - len(noops) :], strict=True)) if noops else {}
    samples, at = [], 0
    for i, obs, agent, one, per_env in zip(active, observations, agents, acted, branches, strict=True):
        rewards = []
        for pick, (_, res) in enumerate(per_env):
            team_term, success, at = outcome[at], solved[at], at + 1
            local = credited_local(settings, res, team_term, noop_of.get(i))
            reward = combine(settings.reward, team_term, local)
            group = (plays[i].env.problem.id, role, turn)
            samples.append(
                make_sample(Seat(agent=agent, role=role, turn=turn, group=group), one, pick, obs, res,
                            local_reward=local, reward=reward, team_reward=team_term, team_success=success)
            )  # fmt: skip
            rewards.append(reward)
        plays[i] = per_env[max(range(len(rewards)), key=rewards.__getitem__)][0]  # continue from the best branch
    return samples, cost + Cost(tokens=tokens)


def tree_rollout(ctx: Acting, envs: list[TurnEnv], k: int, assignment: list[Assignment]) -> Rollout:
    """AT-GRPO tree sampling over a batch of envs (k=1 with a greedy `ctx` is a plain greedy episode)."""
    plays = [Play(env) for env in envs]  # the caller's envs are only copied, never stepped
    samples: list[Sample] = []
    cost = Cost()
    for turn in range(ctx.settings.max_turns):
        keys = [(ctx.base, play.env.problem.id) for play in plays]
        _, declaring = declare_intents(ctx, plays, assignment, keys, turn)  # not trained under `tree`
        cost += declaring
        roles = envs[0].roles
        for r, role in enumerate(roles):
            if all(play.done for play in plays):
                break
            later = roles[r + 1 :] if plays_on(ctx.settings.reward, k, role, envs[0]) else ()  # who plays branches on
            taken, spent = _tree_step(ctx, plays, assignment, Node(turn=turn, role=role, later=later, k=k))
            samples += taken
            cost += spent
    return Rollout(samples=samples, episodes=[record(play) for play in plays], assignment=assignment, **asdict(cost))
