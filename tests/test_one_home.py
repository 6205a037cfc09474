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
