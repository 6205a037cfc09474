"""A scripted stand-in for `Team` in rollouts: no model, the actions are written by the test."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch

from pettingllms_cli.analysis.rollout_settings import rollout_settings
from pettingllms_cli.rollout import episodes
from pettingllms_cli.rollout import on_policy as rollout_module
from pettingllms_cli.rollout.collect import rollout

Script = dict[str, list[str | Callable[[list[dict]], str]]]


class ScriptedTeam:
    """Candidate j of a role is `script[role][j]`: a text (after the prefill) or a function of the role's observation.

    `role_of(messages)` names the role an observation belongs to. Play-outs and greedy episodes
    (one candidate) take `script[role][0]`. `prompts` records every observation encoded, in order.
    """

    def __init__(self, script: Script, role_of: Callable[[list[dict]], str]):
        self.script, self.role_of = script, role_of
        self.prompts: list[list[dict]] = []

    def encode(self, agent, messages):
        self.prompts.append(messages)
        return [len(self.prompts) - 1]

    def sample_mixed(self, agents, prompts, k, max_new_tokens, temperature, greedy=False, seeds=None):
        return [[torch.tensor([p[0] * 1000 + j]) for j in range(k)] for p in prompts]

    def decode(self, agent, ids):
        prompt, j = divmod(int(ids[0]), 1000)
        messages = self.prompts[prompt]
        entry = self.script[self.role_of(messages)][j]
        return entry(messages) if callable(entry) else entry


# The rollouts as tests call them, from a spec: each builds the rollout's settings as training does.
def tree_rollout(sampler, spec, envs, k, greedy=False, assignment=None):
    return rollout(sampler, replace(rollout_settings(spec), kind="tree"), envs, k, greedy, assignment)


def parallel_rollout(sampler, spec, envs, k, assignment=None):
    return rollout(sampler, replace(rollout_settings(spec), kind="parallel"), envs, k, False, assignment)


def on_policy_episodes(sampler, spec, envs, tree, greedy=False):
    return rollout_module.on_policy_episodes(sampler, rollout_settings(spec), envs, tree, greedy)


def make_envs(spec, problems):
    return episodes.make_envs(rollout_settings(spec), problems)
