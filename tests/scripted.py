"""A scripted stand-in for `Team` in rollouts: no model, the actions are written by the test."""

from __future__ import annotations

from collections.abc import Callable

import torch

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
