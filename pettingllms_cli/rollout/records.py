"""What a rollout hands the layers below the pipeline: scored samples (one per sampled action) and the step's
episodes as `Episode` records (episodes.py), with what sampling cost. Plain data: it is gathered
across ranks, and the algorithms read nothing else. The records are frozen and built by keyword: a
rollout builds each once, when everything it holds is known, and the layers above never write into
them (advantages travel beside the samples, training/loop.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from pettingllms_cli.envs.messages import Message
from pettingllms_cli.rollout.episodes import Episode
from pettingllms_cli.rollout.roles import Assignment


@dataclass(frozen=True, kw_only=True)
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
    env_local_reward: float = 0.0  # the env's own local reward, whatever the credit
    messages: list[Message] = field(default_factory=list)  # the observation (text level, for distillation)
    team_success: bool = False  # the team had solved the problem once this action's turn (tree) or episode (parallel) ended
    verdict_due: bool | None = None  # a judge's action: the verdict the facts called for (envs/review.py `DUE`); else None


@dataclass(frozen=True, kw_only=True)
class Rollout:
    samples: list[Sample] = field(default_factory=list)
    episodes: list[Episode] = field(default_factory=list)  # what each episode did (the tree's: its best branch)
    tokens: int = 0  # completion tokens generated
    seconds: float = 0.0  # wall time of sampling and stepping
    assignment: list[Assignment] = field(default_factory=list)  # role -> agent of each episode
    intents: list[Sample] = field(default_factory=list)  # trainable intent declarations (`parallel` + intent protocol)
    on_policy: list[Episode] = field(default_factory=list)  # one episode per problem played by the policy (on_policy_episodes)
    on_policy_tokens: int = 0  # tokens sampled for those episodes beyond the tree's own (not in `tokens`, not trained)
    playout_tokens: int = 0  # of `tokens`: those sampled to play branches on to the turn's end (credit.py)
    playout_actions: int = 0  # the actions those play-outs sampled (not trained; not in `samples`)
    intent_actions: int = 0  # intents declared (coordination.protocol: intent), trained (`parallel`) or not (`tree`)
    on_policy_seconds: float = 0.0  # wall time of the on-policy episodes: measurement, not training
