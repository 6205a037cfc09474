"""Registered environments by versioned name."""

from pettingllms_cli.envs.base import Problem, StepResult, TurnEnv
from pettingllms_cli.envs.code import CodeEnv
from pettingllms_cli.envs.function_call import FunctionCallEnv
from pettingllms_cli.envs.math_tool import MathToolEnv
from pettingllms_cli.envs.plan_path import PlanPathEnv
from pettingllms_cli.envs.sokoban import SokobanEnv
from pettingllms_cli.envs.sql_query import SqlEnv
from pettingllms_cli.envs.sudoku import SudokuEnv

ENVS: dict[str, type[TurnEnv]] = {
    env.name: env for env in (MathToolEnv, FunctionCallEnv, CodeEnv, SqlEnv, SudokuEnv, PlanPathEnv, SokobanEnv)
}

__all__ = ["ENVS", "Problem", "StepResult", "TurnEnv"]
