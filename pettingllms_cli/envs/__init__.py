"""Registered environments by versioned name; other envs by entry point or import path (envs/registry.py)."""

from pettingllms_cli.envs.base import Problem, StepResult, TurnEnv
from pettingllms_cli.envs.code import CodeEnv
from pettingllms_cli.envs.external import ExternalEnv
from pettingllms_cli.envs.function_call import FunctionCallEnv
from pettingllms_cli.envs.function_select import FunctionSelectEnv
from pettingllms_cli.envs.math_tool import MathToolEnv
from pettingllms_cli.envs.plan_path import PlanPathEnv
from pettingllms_cli.envs.registry import EnvError, EnvRegistry
from pettingllms_cli.envs.sokoban import SokobanEnv
from pettingllms_cli.envs.sql_query import SqlEnv
from pettingllms_cli.envs.sudoku import SudokuEnv

_ALL = (MathToolEnv, FunctionCallEnv, FunctionSelectEnv, CodeEnv, SqlEnv, SudokuEnv, PlanPathEnv, SokobanEnv)
ENVS = EnvRegistry({env.name: env for env in _ALL})
ENVS.resolved[ExternalEnv.name] = ExternalEnv  # a user's program is the team (docs/external.md): named, not listed

__all__ = ["ENVS", "EnvError", "Problem", "StepResult", "TurnEnv"]
