"""Rollouts: turn the team's policies loose on a batch of envs and record scored samples.

`tree` (AT-GRPO): at each (turn, role), K candidates per env, each stepped on a copy of the
env; the K share one prompt and form the group (problem, role, turn); the episode continues
from the best branch. Roles act in turn order, so role i+1 sees role i's chosen action.
`parallel`: K independent episodes per problem; an agent's samples are scored by their
episode's final reward and grouped by (problem, agent).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from pettingllms_cli.envs.base import TurnEnv
from pettingllms_cli.policy import Team
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
    local_reward: float
    advantage: float = 0.0


@dataclass
class Rollout:
    samples: list[Sample] = field(default_factory=list)
    episodes: list[TurnEnv] = field(default_factory=list)  # the env each episode ended in
    tokens: int = 0  # completion tokens generated
    seconds: float = 0.0  # wall time of sampling and stepping


def _prefill(messages: list[dict]) -> str:
    return messages[-1]["content"] if messages[-1]["role"] == "assistant" else ""


def _act(team: Team, spec: Experiment, role: str, envs: list[TurnEnv], k: int, greedy: bool, rollout: Rollout):
    """Sample k actions for `role` in every env (one batched generate); yield (env, prompt, [(text, ids)])."""
    agent = spec.role_owner()[role]
    observations = [env.observe(role) for env in envs]
    prompts = [team.encode(agent, obs) for obs in observations]
    t = spec.train
    completions = team.sample(agent, prompts, k, t.max_new_tokens, t.temperature, greedy=greedy)
    for env, obs, prompt, cands in zip(envs, observations, prompts, completions):
        rollout.tokens += sum(len(c) for c in cands)
        texts = [_prefill(obs) + team.decode(agent, c) for c in cands]
        yield env, agent, prompt, list(zip(texts, cands))


def _reward(spec: Experiment, team_reward: float, local_reward: float) -> float:
    return spec.reward.team_weight * team_reward + spec.reward.local_weight * local_reward


def tree_rollout(team: Team, spec: Experiment, envs: list[TurnEnv], k: int, greedy: bool = False) -> Rollout:
    """AT-GRPO tree sampling over a batch of envs (k=1 with greedy=True is a plain greedy episode)."""
    rollout = Rollout()
    envs = list(envs)
    for turn in range(spec.env.max_turns):
        for role in envs[0].possible_agents:
            active = [i for i, env in enumerate(envs) if not env.done]
            if not active:
                break
            acted = _act(team, spec, role, [envs[i] for i in active], k, greedy, rollout)
            for i, (env, agent, prompt, candidates) in zip(active, acted):
                branches, rewards = [], []
                for text, ids in candidates:
                    branch = env.copy()
                    res = branch.step(role, text)
                    reward = _reward(spec, res.team_reward, res.local_reward)
                    group = (env.problem.id, role, turn)
                    rollout.samples.append(
                        Sample(agent, role, turn, env.problem.id, group, prompt, ids, text, reward, res.team_reward, res.local_reward)
                    )
                    branches.append(branch)
                    rewards.append(reward)
                envs[i] = branches[max(range(len(rewards)), key=rewards.__getitem__)]
    rollout.episodes = envs
    return rollout


def parallel_rollout(team: Team, spec: Experiment, envs: list[TurnEnv], k: int) -> Rollout:
    """K independent episodes per env; each agent's samples get their episode's final reward."""
    rollout = Rollout()
    episodes = [env.copy() for env in envs for _ in range(k)]
    per_episode: list[list[Sample]] = [[] for _ in episodes]
    for turn in range(spec.env.max_turns):
        for role in episodes[0].possible_agents:
            active = [i for i, env in enumerate(episodes) if not env.done]
            if not active:
                break
            acted = _act(team, spec, role, [episodes[i] for i in active], 1, False, rollout)
            for i, (env, agent, prompt, [(text, ids)]) in zip(active, acted):
                res = env.step(role, text)
                group = (env.problem.id, agent)
                per_episode[i].append(
                    Sample(agent, role, turn, env.problem.id, group, prompt, ids, text, 0.0, res.team_reward, res.local_reward)
                )
    for env, samples in zip(episodes, per_episode):
        for agent in {s.agent for s in samples}:
            own = [s for s in samples if s.agent == agent]
            local = sum(s.local_reward for s in own) / len(own)
            for s in own:
                s.reward = _reward(spec, float(env.success), local)
        rollout.samples += samples
    rollout.episodes = episodes
    return rollout
