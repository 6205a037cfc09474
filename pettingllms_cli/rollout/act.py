"""One action, the step every rollout is made of: view -> encode -> sample -> decode, then the caller steps the
env (a branch's copy under `tree`, the episode under `parallel`) and records a `Sample`.

Every rollout (tree.py, parallel.py, playout.py, on_policy.py) and the intent round below sample through `act`,
so the batching, the per-row seeds (policy/sampling.py) and the token count are written once.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from pettingllms_cli.envs.base import DUE, Message, StepResult
from pettingllms_cli.envs.messages import action_text
from pettingllms_cli.policy.sampler import Sampler
from pettingllms_cli.policy.sampling import row_seed
from pettingllms_cli.rollout import coordination
from pettingllms_cli.rollout.coordination import Play
from pettingllms_cli.rollout.credit import local_term
from pettingllms_cli.rollout.records import Sample
from pettingllms_cli.rollout.roles import Assignment
from pettingllms_cli.rollout.settings import RolloutSettings

Candidates = list[tuple[str, torch.Tensor]]  # (text, ids) of each sampled continuation


@dataclass(frozen=True, kw_only=True)
class Acting:
    """What every action of one rollout shares: who samples, at which settings, greedy or not, the draws' base seed."""

    sampler: Sampler
    settings: RolloutSettings
    greedy: bool
    base: int  # base_seed() of the step: each row's draws are seeded from it and the row's keys


@dataclass(frozen=True, kw_only=True)
class Cost:
    """What sampling spent, summed over a rollout's helpers (each returns its own); the `Rollout` fields of that name."""

    tokens: int = 0  # completion tokens generated, play-outs and intents included
    playout_tokens: int = 0  # of `tokens`: those that played branches on to the turn's end (credit.py)
    playout_actions: int = 0  # the actions those play-outs sampled (not trained)
    intent_actions: int = 0  # intents declared (coordination.protocol: intent)

    def __add__(self, other: Cost) -> Cost:
        return Cost(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})


@dataclass(frozen=True, kw_only=True)
class Node:
    """One (turn, role) of a rollout: the role that acts, the later roles that play its actions on (playout.py), K."""

    turn: int
    role: str
    later: tuple[str, ...]
    k: int


@dataclass(frozen=True, kw_only=True)
class Acted:
    """One observation's sampled continuations: the prompt they share and each (text, ids)."""

    prompt: list[int]
    candidates: Candidates


def act(
    ctx: Acting, observations: list[list[Message]], agents: list[str], k: int, seeds: list[int], max_new_tokens: int = 0
) -> tuple[list[Acted], int]:
    """Sample k continuations of each observation by its agent; each observation's `Acted`, and the tokens generated.

    Agents on one base share one batched generate, each row through its own adapter (`Sampler.sample_mixed`).
    Observation i's draws come from seeds[i] alone (sampling.py), whatever else shares the batch or the rank.
    """
    sampler, settings = ctx.sampler, ctx.settings
    prompts = [sampler.encode(agent, obs) for agent, obs in zip(agents, observations, strict=True)]
    limit = max_new_tokens or settings.max_new_tokens
    completions = sampler.sample_mixed(agents, prompts, k, limit, settings.temperature, ctx.greedy, seeds)
    acted, tokens = [], 0
    for agent, obs, prompt, cands in zip(agents, observations, prompts, completions, strict=True):
        tokens += sum(len(c) for c in cands)
        texts = [action_text(obs, sampler.decode(agent, c)) for c in cands]
        acted.append(Acted(prompt=prompt, candidates=list(zip(texts, cands, strict=True))))
    return acted, tokens


@dataclass(frozen=True, kw_only=True)
class Seat:
    """Who acted where: the agent, the role it played, the turn, and the group its sample joins (group[0]: the problem)."""

    agent: str
    role: str
    turn: int
    group: tuple


def make_sample(
    seat: Seat, acted: Acted, pick: int, obs: list[Message], res: StepResult | None = None, **scores: float | bool
) -> Sample:
    """Candidate `pick` of `acted` as the Sample of `seat` (an intent when there is no StepResult).

    `scores`: reward, local_reward, team_success and, when it is not the team reward right after the action
    (a play-out's), team_reward.
    """
    text, ids = acted.candidates[pick]
    team_reward, env_local = (res.team_reward, res.local_reward) if res is not None else (0.0, 0.0)
    scores = {"team_reward": team_reward, "reward": 0.0, "local_reward": 0.0} | scores
    return Sample(
        agent=seat.agent, role=seat.role, turn=seat.turn, problem_id=seat.group[0], group=seat.group, prompt=acted.prompt,
        completion=ids, text=text, env_local_reward=env_local, messages=obs,
        verdict_due=res.info.get(DUE) if res is not None else None, **scores,
    )  # fmt: skip


def credited_local(settings: RolloutSettings, res: StepResult, team_reward: float, noop: float | None) -> float:
    """The action's credited local term, plus the agreement bonus when it did what its intent said."""
    bonus = settings.coordination.agreement_bonus * float(res.info.get("intent_agrees", False))
    return local_term(res.local_reward, team_reward, noop) + bonus


def declare_intents(
    ctx: Acting, plays: list[Play], agents_of: list[Assignment], seed_keys: list[tuple], turn: int
) -> tuple[list[list[Sample]], Cost]:
    """The intent round of a turn: each role, in turn order, declares in every unfinished episode; returns each
    episode's declarations and their cost.

    Episode i's intent draws are seeded by (seed_keys[i], role, turn), like its actions (sampling.py).
    """
    declared: list[list[Sample]] = [[] for _ in plays]
    cost = Cost()
    if ctx.settings.coordination.protocol != "intent":
        return declared, cost
    active = [i for i, play in enumerate(plays) if not play.done]
    for role in plays[0].env.roles if plays else ():
        observations = [coordination.intent_prompt(plays[i].env.observe(role), plays[i].intents) for i in active]
        agents = [agents_of[i][role] for i in active]
        seeds = [row_seed(*seed_keys[i], role, turn, "intent") for i in active]
        acted, tokens = act(ctx, observations, agents, 1, seeds, ctx.settings.coordination.intent_tokens)
        cost += Cost(tokens=tokens, intent_actions=len(active))
        for i, obs, agent, one in zip(active, observations, agents, acted, strict=True):
            play, env = plays[i], plays[i].env
            play.declare(role, coordination.extract(one.candidates[0][0]))
            group = (env.problem.id, agent)
            declared[i].append(make_sample(Seat(agent=agent, role=role, turn=env.turn, group=group), one, 0, obs))
    return declared, cost
