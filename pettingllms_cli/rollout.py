"""Rollouts: turn the team's policies loose on a batch of envs and record scored samples.

`tree` (AT-GRPO): at each (turn, role), K candidates per env, each stepped on a copy of the
env; the K share one prompt and form the group (problem, role, turn); the episode continues
from the best branch. Roles act in turn order, so role i+1 sees role i's chosen action.
Each episode has its own role -> agent assignment (roles.py); the default is the static one.
`parallel`: K independent episodes per problem; an agent's samples are scored by their
episode's final reward and grouped by (problem, agent).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from pettingllms_cli.credit import combine, local_term, noop_team_reward
from pettingllms_cli.envs.base import Message, TurnEnv
from pettingllms_cli.policy import Team
from pettingllms_cli.roles import Assignment
from pettingllms_cli.sampling import base_seed, row_seed
from pettingllms_cli.spec import Experiment


@dataclass
class Sample:
    agent: str
    role: str
    turn: int
    problem_id: str
    group: tuple
    prompt: list[int]
    completion: torch.Tensor  # [T] token ids, EOS included when sampled
    text: str
    reward: float
    team_reward: float
    local_reward: float  # the credited local term (the env's own, or the difference to a no-op)
    advantage: float = 0.0
    env_local_reward: float = 0.0  # the env's own local reward, whatever the credit
    messages: list[Message] = field(default_factory=list)  # the observation (text level, for distillation)


@dataclass
class Rollout:
    samples: list[Sample] = field(default_factory=list)
    episodes: list[TurnEnv] = field(default_factory=list)  # the env each episode ended in
    tokens: int = 0  # completion tokens generated
    seconds: float = 0.0  # wall time of sampling and stepping
    assignment: list[Assignment] = field(default_factory=list)  # role -> agent of each episode


def _prefill(messages: list[dict]) -> str:
    return messages[-1]["content"] if messages[-1]["role"] == "assistant" else ""


def _act(
    team: Team,
    spec: Experiment,
    role: str,
    envs: list[TurnEnv],
    agents: list[str],
    k: int,
    greedy: bool,
    rollout: Rollout,
    seeds: list[int] | None = None,
):
    """Sample k actions for `role` in every env, one batched generate per agent; (env, agent, prompt, obs, [(text, ids)]) per env.

    Env i's draws come from seeds[i] alone (sampling.py), whatever else shares the batch or the rank.
    """
    observations = [env.observe(role) for env in envs]
    acted: list = [None] * len(envs)
    t = spec.train
    for agent in sorted(set(agents)):
        idx = [i for i, a in enumerate(agents) if a == agent]
        prompts = [team.encode(agent, observations[i]) for i in idx]
        mine = [seeds[i] for i in idx] if seeds is not None else None
        completions = team.sample(agent, prompts, k, t.max_new_tokens, t.temperature, greedy=greedy, seeds=mine)
        for i, prompt, cands in zip(idx, prompts, completions, strict=True):
            rollout.tokens += sum(len(c) for c in cands)
            texts = [_prefill(observations[i]) + team.decode(agent, c) for c in cands]
            acted[i] = (envs[i], agent, prompt, observations[i], list(zip(texts, cands, strict=True)))
    return acted


def _reward(spec: Experiment, team_reward: float, local_reward: float) -> float:
    return combine(spec, team_reward, local_reward)


def tree_rollout(
    team: Team, spec: Experiment, envs: list[TurnEnv], k: int, greedy: bool = False, assignment: list[Assignment] | None = None
) -> Rollout:
    """AT-GRPO tree sampling over a batch of envs (k=1 with greedy=True is a plain greedy episode)."""
    rollout = Rollout(assignment=assignment or [spec.role_owner() for _ in envs])
    envs = list(envs)
    base = base_seed()  # alike on every rank; each problem's draws are keyed by its id, not its batch slot
    for turn in range(spec.env.max_turns):
        for role in envs[0].possible_agents:
            active = [i for i, env in enumerate(envs) if not env.done]
            if not active:
                break
            agents = [rollout.assignment[i][role] for i in active]
            seeds = [row_seed(base, envs[i].problem.id, role, turn) for i in active]
            acted = _act(team, spec, role, [envs[i] for i in active], agents, k, greedy, rollout, seeds)
            for i, (env, agent, prompt, obs, candidates) in zip(active, acted, strict=True):
                noop = noop_team_reward(spec, env, role)
                branches, rewards = [], []
                for text, ids in candidates:
                    branch = env.copy()
                    res = branch.step(role, text)
                    local = local_term(res, noop)
                    reward = _reward(spec, res.team_reward, local)
                    group = (env.problem.id, role, turn)
                    rollout.samples.append(
                        Sample(
                            agent,
                            role,
                            turn,
                            env.problem.id,
                            group,
                            prompt,
                            ids,
                            text,
                            reward,
                            res.team_reward,
                            local,
                            env_local_reward=res.local_reward,
                            messages=obs,
                        )
                    )
                    branches.append(branch)
                    rewards.append(reward)
                envs[i] = branches[max(range(len(rewards)), key=rewards.__getitem__)]
    rollout.episodes = envs
    return rollout


def parallel_rollout(
    team: Team, spec: Experiment, envs: list[TurnEnv], k: int, assignment: list[Assignment] | None = None
) -> Rollout:
    """K independent episodes per env; each agent's samples get their episode's final reward."""
    per_problem = assignment or [spec.role_owner() for _ in envs]
    rollout = Rollout(assignment=[a for a in per_problem for _ in range(k)])
    episodes = [env.copy() for env in envs for _ in range(k)]
    base = base_seed()
    per_episode: list[list[Sample]] = [[] for _ in episodes]
    for turn in range(spec.env.max_turns):
        for role in episodes[0].possible_agents:
            active = [i for i, env in enumerate(episodes) if not env.done]
            if not active:
                break
            agents = [rollout.assignment[i][role] for i in active]
            seeds = [row_seed(base, episodes[i].problem.id, role, turn, i % k) for i in active]  # i % k: episode of its problem
            acted = _act(team, spec, role, [episodes[i] for i in active], agents, 1, False, rollout, seeds)
            for i, (env, agent, prompt, obs, [(text, ids)]) in zip(active, acted, strict=True):
                noop = noop_team_reward(spec, env, role)
                res = env.step(role, text)
                group = (env.problem.id, agent)
                per_episode[i].append(
                    Sample(
                        agent,
                        role,
                        turn,
                        env.problem.id,
                        group,
                        prompt,
                        ids,
                        text,
                        0.0,
                        res.team_reward,
                        local_term(res, noop),
                        env_local_reward=res.local_reward,
                        messages=obs,
                    )
                )
    for env, samples in zip(episodes, per_episode, strict=True):
        for agent in {s.agent for s in samples}:
            own = [s for s in samples if s.agent == agent]
            local = sum(s.local_reward for s in own) / len(own)
            for s in own:
                s.reward = _reward(spec, float(env.success), local)
        rollout.samples += samples
    rollout.episodes = episodes
    return rollout
