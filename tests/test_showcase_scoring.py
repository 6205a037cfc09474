"""The showcase function-call pair and `compare` score by BFCL's rules (issue 34 item 5)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from pettingllms_cli.analysis.budget import check_equal_arms
from pettingllms_cli.envs.function_call import FunctionCallEnv
from pettingllms_cli.errors import UserError
from pettingllms_cli.spec import parse_spec

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
PAIR = ("showcase_function_call_single.yaml", "showcase_function_call_team.yaml")


def _tree(name: str) -> dict:
    return yaml.safe_load((EXPERIMENTS / name).read_text())


@pytest.mark.parametrize("name", PAIR)
def test_a_showcase_function_call_arm_scores_by_bfcl_rules(name):
    spec = parse_spec(_tree(name))
    problem = FunctionCallEnv.load_problems(spec.env.data, "test", spec.seed, 1, spec.env.options)[0]
    env = FunctionCallEnv(problem, spec.env.layout, spec.env.max_turns, spec.env.options)
    assert spec.env.options.get("scoring", "bfcl") == "bfcl" and not env.lenient


def test_compare_refuses_a_lenient_arm_against_a_bfcl_one():
    single, team = (_tree(name) for name in PAIR)
    check_equal_arms([Path(PAIR[0]), Path(PAIR[1])], [parse_spec(single), parse_spec(team)])  # the showcase pair: equal
    lenient = copy.deepcopy(team)
    lenient["env"]["options"] = {"scoring": "lenient"}
    with pytest.raises(UserError, match="options"):
        check_equal_arms([Path(PAIR[0]), Path(PAIR[1])], [parse_spec(single), parse_spec(lenient)])
