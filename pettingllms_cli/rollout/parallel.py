"""`parallel` rollouts: K independent episodes per problem; an agent's samples are scored by their episode's final
reward and grouped by (problem, agent).

With `coordination.protocol: intent` each turn opens with an intent round (act.py `declare_intents`); under
`parallel` those declarations are part of the agent's episode and trained with its reward (`Rollout.intents`).
"""

from __future__ import annotations

from dataclasses import asdict, replace

from pettingllms_cli.envs.base import StepResult, TurnEnv
from pettingllms_cli.policy.sampling import row_seed
from pettingllms_cli.rollout.act import Acting, Cost, Node, Seat, act, credited_local, declare_intents, make_sample
from pettingllms_cli.rollout.coordination import Play
from pettingllms_cli.rollout.credit import NOOP, combine, plays_on
from pettingllms_cli.rollout.episodes import record
from pettingllms_cli.rollout.playout import playout, stepped
from pettingllms_cli.rollout.records import Rollout, Sample
from pettingllms_cli.rollout.roles import Assignment


def _noops(ctx: Acting, episodes: list[Play], assignment: list[Assignment], active: list[int], node: Node) -> tuple[dict, Cost]:
    """Under `difference`: each active episode's no-op team outcome for `node.role` ({} otherwise), and its cost.

    With `turn_end` the no-op is played on with the seeds of the episode's own later actions, so it
    differs from the episode only through the action it replaces.
    """
    if ctx.settings.reward.credit != "difference":
        return {}, Cost()
    noops = [stepped(episodes[i], node.role, NOOP) for i in active]
    ids = [episodes[i].env.problem.id for i in active]
    seed_of = lambda j, later_role: row_seed(ctx.base, ids[j], later_role, node.turn, active[j] % node.k)  # noqa: E731  the episode's own draw
    later = node.later if plays_on(ctx.settings.reward, node.k, node.role, episodes[0].env) else ()
    outcome, _, cost = playout(ctx, noops, [assignment[i] for i in active], seed_of, later)
    return dict(zip(active, outcome, strict=True)), cost


def _turn(ctx: Acting, episodes: list[Play], assignment: list[Assignment], turn: int, k: int) -> tuple[list[list[Sample]], Cost]:
    """One turn of every unfinished episode: each role acts once, in turn order; each episode's new samples.

    Under `difference` with a play-out, an action's team outcome is its episode's team reward at the turn's end.
    """
    settings, roles = ctx.settings, episodes[0].env.roles
    taken: list[list[Sample]] = [[] for _ in episodes]
    turn_end = [0.0] * len(episodes)  # each episode's team reward after its latest action of this turn
    pending: list[tuple[int, int, StepResult, float]] = []  # (episode, sample index, result, no-op outcome)
    cost = Cost()
    for r, role in enumerate(roles):
        active = [i for i, play in enumerate(episodes) if not play.done]
        if not active:
            break
        observations = [episodes[i].view(role) for i in active]
        agents = [assignment[i][role] for i in active]
        seeds = [row_seed(ctx.base, episodes[i].env.problem.id, role, turn, i % k) for i in active]  # i % k: its episode
        acted, tokens = act(ctx, observations, agents, 1, seeds)
        noop_of, spent = _noops(ctx, episodes, assignment, active, Node(turn=turn, role=role, later=roles[r + 1 :], k=k))
        cost += spent + Cost(tokens=tokens)
        for i, obs, agent, one in zip(active, observations, agents, acted, strict=True):
            env = episodes[i].env
            res = episodes[i].step(role, one.candidates[0][0])
            turn_end[i] = res.team_reward
            local = credited_local(settings, res, res.team_reward, noop_of.get(i))
            seat = Seat(agent=agent, role=role, turn=turn, group=(env.problem.id, agent))
            taken[i].append(make_sample(seat, one, 0, obs, res, local_reward=local))
            if i in noop_of and plays_on(settings.reward, k, role, env):
                pending.append((i, len(taken[i]) - 1, res, noop_of[i]))
    for i, at, res, noop in pending:  # the action's team outcome: the episode's team reward at the turn's end
        taken[i][at] = replace(taken[i][at], local_reward=credited_local(settings, res, turn_end[i], noop))
    return taken, cost


def _scored(ctx: Acting, env: TurnEnv, samples: list[Sample], declared: list[Sample]) -> tuple[list[Sample], list[Sample]]:
    """An episode's samples and intents, each agent's with the episode's reward: its outcome and the agent's mean local term."""
    reward_of = {}
    for agent in {s.agent for s in samples}:
        own = [s.local_reward for s in samples if s.agent == agent]
        reward_of[agent] = combine(ctx.settings.reward, float(env.success), sum(own) / len(own))

    def score(s: Sample) -> Sample:  # an intent of an agent that took no action keeps no reward
        return replace(s, reward=reward_of[s.agent], team_success=env.success) if s.agent in reward_of else s

    return [score(s) for s in samples], [score(d) for d in declared]


def parallel_rollout(ctx: Acting, envs: list[TurnEnv], k: int, assignment: list[Assignment]) -> Rollout:
    """K independent episodes per env; each agent's samples (and intents) get their episode's final reward.

    `assignment`: each problem's role -> agent map, shared by its K episodes.
    """
    per_episode = [a for a in assignment for _ in range(k)]
    episodes = [Play(env.copy()) for env in envs for _ in range(k)]
    taken: list[list[Sample]] = [[] for _ in episodes]
    intents: list[list[Sample]] = [[] for _ in episodes]
    cost = Cost()
    for turn in range(ctx.settings.max_turns):
        keys = [(ctx.base, play.env.problem.id, i % k) for i, play in enumerate(episodes)]  # i % k: episode of its problem
        declared, declaring = declare_intents(ctx, episodes, per_episode, keys, turn)
        acted, acting = _turn(ctx, episodes, per_episode, turn, k)
        cost += declaring + acting
        for i in range(len(episodes)):
            intents[i] += declared[i]
            taken[i] += acted[i]
    scored = [_scored(ctx, play.env, own, declared) for play, own, declared in zip(episodes, taken, intents, strict=True)]
    return Rollout(
        samples=[s for own, _ in scored for s in own], intents=[d for _, declared in scored for d in declared],
        episodes=[record(play) for play in episodes], assignment=per_episode, **asdict(cost),
    )  # fmt: skip
