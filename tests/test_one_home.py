"""Facts written once (issue 31): each is declared in one place, and what the docs and schema say of it is checked here
against that declaration, so a doc that drifts fails."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pettingllms_cli.analysis.header import spec_item
from pettingllms_cli.errors import UserError
from pettingllms_cli.spec import parse_spec

ROOT = Path(__file__).resolve().parents[1]


def test_algorithm_name_lists_the_algorithms_and_the_header_names_it(smoke_tree):
    spec = parse_spec(smoke_tree)
    assert spec.algorithm.name == "at_grpo"
    assert "at_grpo tree K=4" in spec_item(spec.model_dump(mode="json"))  # what the report says it trained
    smoke_tree["algorithm"]["name"] = "ppo"
    with pytest.raises(UserError, match=r"algorithm\.name: Input should be 'at_grpo'$"):
        parse_spec(smoke_tree)


def _listed(text: str) -> dict[str, list[str]]:
    """`name: role, role; name: role` as a mapping (backticks dropped)."""
    pairs = (part.split(":") for part in text.replace("`", "").split("; "))
    return {name.strip(): [r.strip() for r in roles.split(",")] for name, roles in pairs}


def test_docs_and_schema_name_exactly_the_declared_deferred_roles():
    """docs/credit.md's list and the `team_signal` schema text name every env's `deferred_roles` and nothing else."""
    from pettingllms_cli.envs import ENVS
    from pettingllms_cli.spec import Experiment

    declared = {name: sorted(env.deferred_roles) for name, env in ENVS.items() if env.deferred_roles}
    docs = " ".join((ROOT / "docs" / "credit.md").read_text().split())
    in_docs = re.search(r"`deferred` \(the default\): the roles the env lists in `deferred_roles` \((.*?); a role the", docs)
    schema = Experiment.model_json_schema()["$defs"]["RewardSpec"]["properties"]["team_signal"]["description"]
    in_schema = re.search(r"the env's deferred_roles: (.*?)\)", schema)
    assert in_docs and in_schema
    assert _listed(in_docs.group(1)) == declared == _listed(in_schema.group(1))
    assert sum(map(len, declared.values())) >= 6  # the team layouts' planner and validator of two envs among them


def test_the_judge_protocol_declares_the_team_layouts_deferred_roles_once():
    from pettingllms_cli.envs.function_call import FunctionCallEnv
    from pettingllms_cli.envs.judging import TEAM, ReviewedEnv
    from pettingllms_cli.envs.math_tool import MathToolEnv

    assert ReviewedEnv.deferred_roles == {"planner", "validator"} == set(TEAM) - {TEAM[-1]}
    for env in (MathToolEnv, FunctionCallEnv):
        assert "deferred_roles" not in vars(env) and env.deferred_roles is ReviewedEnv.deferred_roles
        assert not {"observe", "reference_action"} & set(vars(env))  # the protocol dispatches judges and other roles


def test_the_reward_table_quotes_every_constant_of_envs_rewards():
    """docs/credit.md's table lists each constant local reward with the value envs/rewards.py gives it, and no other."""
    from pettingllms_cli.envs import rewards

    written = {k: v for k, v in vars(rewards).items() if k.isupper() and isinstance(v, float)}
    docs = (ROOT / "docs" / "credit.md").read_text()
    table = {name: float(value) for name, value in re.findall(r"^\| `([A-Z_]+)` \| (-?[\d.]+) \|", docs, re.MULTILINE)}
    assert table == written and len(written) >= 17


def test_the_envs_pay_the_constants_of_envs_rewards():
    """Each env module's names are the rewards module's objects, not copies that could drift."""
    from pettingllms_cli.envs import code, function_call, function_select, math_tool, planning, review, rewards, sql_query

    for module in (code, function_call, function_select, math_tool, planning, review, sql_query):
        for name, value in vars(module).items():
            if name in vars(rewards) and name.isupper():
                assert value is getattr(rewards, name), (module.__name__, name)
    envs_md = " ".join((ROOT / "docs" / "envs.md").read_text().split())
    quoted = (rewards.PLAN_RIGHT, rewards.PLAN_OTHER, rewards.PLAN_NONE, rewards.CALL_INVALID)
    assert "earns {} when it is the right one, {} for another offered one and {} otherwise".format(*quoted[:3]) in envs_md
    assert f"or {quoted[3]} when it does not parse" in envs_md


def test_format_bonus_pays_any_action_with_a_digit_as_documented():
    """Not only a call that parses and runs: a refused call and a wrong answer with a digit earn it too."""
    from pettingllms_cli.envs.base import Problem
    from pettingllms_cli.envs.math_tool import CALL_PREFIX, MathToolEnv
    from pettingllms_cli.envs.rewards import CALL_FAILED, JUDGED_WRONG

    problem = Problem("p0", "Ann has 12 pens and buys 7 more. How many pens?", 19.0, {"expression": "12+7"})
    env = MathToolEnv(problem, "multi", 1, {"format_bonus": 0.5})
    assert env.step("tool_caller", CALL_PREFIX + '12/0"}}</tool_call>').local_reward == pytest.approx(CALL_FAILED + 0.5)
    assert env.step("verifier", "Answer: 5").local_reward == pytest.approx(JUDGED_WRONG + 0.5)
    docs = " ".join((ROOT / "docs" / "credit.md").read_text().split())
    assert "adds its value to the local reward of any action whose text contains a digit" in docs
