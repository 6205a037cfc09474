"""What a rollout reads of the experiment: a frozen slice of the spec, built once by the layers above
(analysis/rollout_settings.py), so rollout code can be run and tested without a registry-validated spec.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, kw_only=True)
class RewardSettings:
    """How a sampled action's reward is made: r = team_weight * R_team + local_weight * r_local (credit.py)."""

    team_weight: float
    local_weight: float
    credit: str  # `none`: the env's own local reward; `difference`: the outcome minus a no-op's
    team_signal: str  # which candidates are played on to the turn's end (credit.py `plays_on`)


@dataclass(frozen=True, kw_only=True)
class CoordinationSettings:
    """The intent protocol (coordination.py): `none`, or an intent round opening each turn."""

    protocol: str
    intent_tokens: int
    agreement_bonus: float


@dataclass(frozen=True, kw_only=True)
class RolloutSettings:
    """Everything the rollout package reads: sampling, the env to build, credit and coordination."""

    kind: str  # `tree` (AT-GRPO branches) or `parallel` (K independent episodes)
    group_size: int  # K
    max_new_tokens: int
    temperature: float
    env: str  # the env's name; `external` means the user's program plays (external.py)
    layout: str
    max_turns: int
    env_options: Mapping[str, Any]
    role_owner: Mapping[str, str]  # role -> agent: the static assignment
    agent_roles: Mapping[str, tuple[str, ...]]  # agent -> the roles it plays
    reward: RewardSettings
    coordination: CoordinationSettings

    def owners(self) -> dict[str, str]:
        """A fresh role -> agent map of the static assignment (callers may keep it per episode)."""
        return dict(self.role_owner)


@dataclass(frozen=True, kw_only=True)
class AssignmentSettings:
    """What role assignment (roles.py) reads: the mode and its knobs, the turn order, the agents, the static owners."""

    mode: str  # `static`, `rotate` or `adaptive`
    ucb_c: float
    window: int
    roles: tuple[str, ...]  # the layout's roles, in turn order
    agents: tuple[str, ...]  # sorted: YAML order does not matter
    role_owner: Mapping[str, str]  # role -> agent: the static assignment
