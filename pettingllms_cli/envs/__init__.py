"""Registered environments by versioned name."""

from pettingllms_cli.envs.base import Problem, StepResult, TurnEnv
from pettingllms_cli.envs.math_tool import MathToolEnv

ENVS: dict[str, type[TurnEnv]] = {env.name: env for env in (MathToolEnv,)}

__all__ = ["ENVS", "Problem", "StepResult", "TurnEnv"]
