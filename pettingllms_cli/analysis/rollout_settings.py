"""The rollout's slice of the spec (rollout/settings.py), built once per run or evaluation.

It lives here, the lowest layer that may read both the spec and the rollout package, so evaluation
(analysis) and training build it the same way.
"""

from __future__ import annotations

from dataclasses import replace

from pettingllms_cli.envs import ENVS
from pettingllms_cli.rollout.roles import RoleAssigner
from pettingllms_cli.rollout.settings import AssignmentSettings, CoordinationSettings, RewardSettings, RolloutSettings
from pettingllms_cli.spec import Experiment


def rollout_settings(spec: Experiment) -> RolloutSettings:
    reward, coordination = spec.reward, spec.coordination
    return RolloutSettings(
        kind=spec.algorithm.rollout,
        group_size=spec.algorithm.group_size,
        max_new_tokens=spec.train.max_new_tokens,
        temperature=spec.train.temperature,
        env=spec.env.name,
        layout=spec.env.layout,
        max_turns=spec.env.max_turns,
        env_options=spec.env.options,
        role_owner=spec.role_owner(),
        agent_roles={name: tuple(agent.roles) for name, agent in spec.agents.items()},
        reward=RewardSettings(
            team_weight=reward.team_weight,
            local_weight=reward.local_weight,
            credit=reward.credit,
            team_signal=reward.team_signal,
        ),
        coordination=CoordinationSettings(
            protocol=coordination.protocol,
            intent_tokens=coordination.intent_tokens,
            agreement_bonus=coordination.agreement_bonus,
        ),
    )


def evaluation_settings(spec: Experiment, temperature: float | None) -> RolloutSettings:
    """What evaluation and `play` roll out with: one tree episode per problem (k=1), greedy or at `temperature`."""
    settings = rollout_settings(spec)
    return replace(settings, kind="tree", temperature=settings.temperature if temperature is None else temperature)


def role_assigner(spec: Experiment) -> RoleAssigner:
    """The run's role assignment (rollout/roles.py), set up from the spec's `assignment` section."""
    return RoleAssigner(
        AssignmentSettings(
            mode=spec.assignment.mode,
            ucb_c=spec.assignment.ucb_c,
            window=spec.assignment.window,
            roles=tuple(ENVS[spec.env.name].layouts[spec.env.layout]),
            agents=tuple(sorted(spec.agents)),
            role_owner=spec.role_owner(),
        )
    )
