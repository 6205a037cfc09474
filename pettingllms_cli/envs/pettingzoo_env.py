"""Any registered env as a PettingZoo AEC env over text actions (`pip install 'pettingllms[pettingzoo]'`).

PettingZoo's agents are our roles, acting in the layout's turn order. An observation is the role's chat messages
as a JSON string (`json.loads` gives `[{"role": ..., "content": ...}]`, ready for a chat template); an action is
the role's whole text, prefill included. After each action every agent is paid the team reward and the actor also
its local reward; the episode ends for all roles at once (solved, handed in, or `max_turns` rounds).
"""

from __future__ import annotations

import json
import random
import string

import numpy as np

from pettingllms_cli.envs import ENVS, TurnEnv
from pettingllms_cli.envs.loading import load_split
from pettingllms_cli.envs.messages import OBSERVATION_CHARS

try:
    from gymnasium import spaces
    from pettingzoo import AECEnv
except ImportError as e:  # an optional extra: say which
    raise ImportError(f"{e}; the PettingZoo adapter needs `pip install 'pettingllms[pettingzoo]'`") from None

ACTION_CHARS = 4000  # the longest action text an agent may send (about 1,000 tokens)


class AnyText(spaces.Text):
    """Text of any Unicode characters up to `max_length` (gymnasium's Text also restricts the characters, and model
    output and observations hold any); `sample()` draws printable ASCII."""

    def __init__(self, max_length: int, seed: int | None = None) -> None:
        super().__init__(max_length=max_length, min_length=0, charset=string.printable, seed=seed)

    def contains(self, x: object) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length


class TextObservation(str):
    """A JSON string of chat messages; `dtype` is the one `spaces.Text` declares, as PettingZoo's checks compare."""

    dtype = np.dtype(str)


class TextAECEnv(AECEnv):
    """A registered env (a name, entry point or `module:Class`) as a PettingZoo AEC env; each reset draws a problem."""

    metadata = {"render_modes": ["ansi"], "is_parallelizable": False}

    def __init__(
        self,
        env_name: str,
        layout: str = "multi",
        max_turns: int = 2,
        data: str = "generated",
        split: str = "train",
        problems: int = 64,
        options: dict | None = None,
        render_mode: str | None = None,
    ) -> None:
        super().__init__()
        self.env_cls: type[TurnEnv] = ENVS.resolve(env_name)
        if layout not in self.env_cls.layouts:
            raise ValueError(f"{env_name}: layouts are {sorted(self.env_cls.layouts)}, not {layout!r}")
        self.layout, self.max_turns, self.options, self.render_mode = layout, max_turns, dict(options or {}), render_mode
        self.problems = load_split(env_name, data, split, 0, problems, self.options)  # the pool each reset draws from
        self.metadata = {**self.metadata, "name": self.env_cls.name}
        self.possible_agents = list(self.env_cls.layouts[layout])
        many = OBSERVATION_CHARS * (2 + 2 * max_turns * len(self.possible_agents))  # system, question, every action
        self._observation_spaces = {a: AnyText(many) for a in self.possible_agents}
        self._action_spaces = {a: AnyText(ACTION_CHARS) for a in self.possible_agents}
        self.rng = random.Random(0)
        self.env: TurnEnv | None = None

    def observation_space(self, agent: str) -> AnyText:
        return self._observation_spaces[agent]

    def action_space(self, agent: str) -> AnyText:
        return self._action_spaces[agent]

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        if seed is not None:
            self.rng = random.Random(seed)
            for i, agent in enumerate(self.possible_agents):
                self._action_spaces[agent].seed(seed + i)
        known = set(self.env_cls.Options.model_fields)  # PettingZoo passes any options; keep the env's own
        env_options = self.options | {k: v for k, v in (options or {}).items() if k in known}
        self.env = self.env_cls(self.rng.choice(self.problems), self.layout, self.max_turns, env_options)
        if seed is not None:
            self.env.reset(seed=seed)  # the env's own randomness too, as PettingZoo's reset(seed) promises
        self.agents = list(self.possible_agents)
        self.rewards = {a: 0.0 for a in self.agents}
        self._cumulative_rewards = {a: 0.0 for a in self.agents}
        self.terminations = {a: False for a in self.agents}
        self.truncations = {a: False for a in self.agents}
        self.infos = {a: {} for a in self.agents}
        self.agent_selection = self.env.current_role

    def observe(self, agent: str) -> TextObservation:
        return TextObservation(json.dumps(self.env.observe(agent), ensure_ascii=False))

    def step(self, action: str | None) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)  # a finished agent's only action is None; it leaves `agents`
            return
        self._cumulative_rewards[agent] = 0.0  # last() handed the actor what it had gathered
        result = self.env.step(agent, action if isinstance(action, str) else "")
        self.rewards = {a: float(result.team_reward) for a in self.agents}
        self.rewards[agent] += float(result.local_reward)
        self.infos[agent] = dict(result.info)
        if result.terminated or result.truncated:  # the episode ends for the whole team
            self.terminations = {a: bool(result.terminated) for a in self.agents}
            self.truncations = {a: bool(result.truncated) for a in self.agents}
        self.agent_selection = self.env.current_role
        self._accumulate_rewards()

    def render(self) -> str | None:
        """The transcript so far, one action a line (`render_mode="ansi"`)."""
        if self.render_mode != "ansi" or self.env is None:
            return None
        return "\n".join(f"{t['turn']} {t['role']}: {t['text']}" for t in self.env.transcript)

    def close(self) -> None:
        self.env = None


def aec_env(env_name: str, **kwargs: object) -> TextAECEnv:
    """`TextAECEnv(env_name, ...)`: PettingZoo's factory spelling.

    >>> env = aec_env("plan_path_v0")
    >>> env.reset(seed=0)
    >>> env.agent_selection, env.possible_agents
    ('tool_agent', ['tool_agent', 'plan_agent'])
    """
    return TextAECEnv(env_name, **kwargs)
