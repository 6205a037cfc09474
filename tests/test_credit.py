"""Team signal for every role (issue 16): a planner's team term is the outcome its choice leads to."""

from __future__ import annotations

import copy

import pytest

from pettingllms_cli.envs.base import Problem
from pettingllms_cli.envs.function_call import CALLER_SYSTEM, FunctionCallEnv
from pettingllms_cli.errors import UserError
from pettingllms_cli.spec import parse_spec
from tests.scripted import ScriptedTeam, parallel_rollout, tree_rollout

FUNCTIONS = [
    {"name": "circle_area", "parameters": {"properties": {"radius": {"type": "integer"}}, "required": ["radius"]}},
    {"name": "square_area", "parameters": {"properties": {"side": {"type": "integer"}}, "required": ["side"]}},
]
GOLD = [{"circle_area": {"radius": [3]}}]
PROBLEM = Problem("circle", "Find the area of a circle with radius 3.", GOLD, {"functions": FUNCTIONS})


def _role(messages: list[dict]) -> str:
    return "caller" if messages[0]["content"] == CALLER_SYSTEM else "planner"


def radius_three(messages: list[dict]) -> str:
    """A caller that always passes radius 3 to whatever function its prefill names (so it needs the planner)."""
    return '"radius": 3}}</tool_call>'


def _spec(smoke_tree: dict, **reward) -> object:
    tree = copy.deepcopy(smoke_tree)
    tree["env"] = {"name": "function_call_v0", "layout": "multi", "max_turns": 1, "eval_problems": 1}
    tree["agents"] = {"planner": {"model": "tiny", "roles": ["planner"]}, "caller": {"model": "tiny", "roles": ["caller"]}}
    tree["reward"] = {"team_weight": 1.0, "local_weight": 0.5, **reward}
    tree["algorithm"]["group_size"] = 2
    return parse_spec(tree)


def _planner(samples) -> dict[str, object]:
    return {s.text.removeprefix("Function: "): s for s in samples if s.role == "planner"}


def _run(spec, planner: list[str]):
    team = ScriptedTeam({"planner": planner, "caller": [radius_three, radius_three]}, _role)
    env = FunctionCallEnv(PROBLEM, "multi", 1, {})
    return team, tree_rollout(team, spec, [env], k=2)


def test_a_planner_gets_the_team_outcome_its_choice_leads_to(smoke_tree):
    _, rollout = _run(_spec(smoke_tree), ["square_area", "circle_area"])
    planner = _planner(rollout.samples)
    assert planner["circle_area"].team_reward == 1.0  # the caller then solved it
    assert planner["square_area"].team_reward == 0.0  # the caller then called the wrong function
    assert planner["circle_area"].reward > planner["square_area"].reward
    assert rollout.playout_tokens > 0 and rollout.playout_actions == 2  # one caller play-out per planner candidate ...
    assert {s.group for s in rollout.samples} == {("circle", "planner", 0), ("circle", "caller", 0)}  # ... but not trained


def test_immediate_team_signal_is_stale_for_the_planner(smoke_tree):
    _, rollout = _run(_spec(smoke_tree, team_signal="immediate"), ["square_area", "circle_area"])
    planner = _planner(rollout.samples)
    assert planner["circle_area"].team_reward == planner["square_area"].team_reward == 0.0
    assert rollout.playout_tokens == 0


def test_difference_credit_reaches_the_planner(smoke_tree):
    """The no-op planner (no function named) leaves the caller to pick among both: its radius-only reply fails."""
    _, rollout = _run(_spec(smoke_tree, credit="difference"), ["square_area", "circle_area"])
    planner = _planner(rollout.samples)
    assert planner["circle_area"].local_reward == 1.0
    assert planner["square_area"].local_reward == 0.0


def test_the_tree_continues_from_the_best_branch_and_the_next_role_sees_its_choice(smoke_tree):
    """The best planner candidate is the second: continuing from branches[0] would fail this test."""
    _, rollout = _run(_spec(smoke_tree), ["square_area", "circle_area"])
    callers = [s for s in rollout.samples if s.role == "caller"]
    assert len(callers) == 2
    assert all('"name": "circle_area"' in s.messages[-1]["content"] for s in callers)  # the caller's prompt holds the choice
    assert all("square_area" not in str(s.messages) for s in callers)
    assert rollout.episodes[0].success and rollout.episodes[0].transcript[0]["function"] == "circle_area"


def test_parallel_difference_credit_plays_the_noop_on(smoke_tree):
    spec = _spec(smoke_tree, credit="difference")
    spec = spec.model_copy(update={"algorithm": spec.algorithm.model_copy(update={"rollout": "parallel"})})
    team = ScriptedTeam({"planner": ["circle_area"], "caller": [radius_three]}, _role)
    rollout = parallel_rollout(team, spec, [FunctionCallEnv(PROBLEM, "multi", 1, {})], k=2)
    planner = [s for s in rollout.samples if s.role == "planner"]
    assert len(planner) == 2 and all(s.local_reward == 1.0 for s in planner)  # immediate: 0 - 0


def test_difference_with_immediate_signal_names_the_deferred_roles(smoke_tree):
    tree = _spec(smoke_tree).model_dump()
    tree["reward"] |= {"credit": "difference", "team_signal": "immediate"}
    with pytest.raises(UserError, match=r"\['planner'\] of function_call_v0 \(multi\) exactly 0.*team_signal: deferred"):
        parse_spec(tree)


def test_difference_with_a_role_that_has_no_noop_is_refused(smoke_tree, monkeypatch):
    monkeypatch.setattr(FunctionCallEnv, "no_noop_roles", frozenset({"caller"}))
    tree = _spec(smoke_tree).model_dump()
    tree["reward"]["credit"] = "difference"
    with pytest.raises(UserError, match=r"role\(s\) \['caller'\] of function_call_v0 \(multi\) have none"):
        parse_spec(tree)


def test_deferred_plays_on_only_the_envs_deferred_roles(smoke_tree):
    """Default `deferred`: the math caller moves the team reward itself, so it costs no play-out; `turn_end` plays it on."""
    from pettingllms_cli.envs.math_tool import MathToolEnv

    problem = Problem("p0", "Tom has 12 apples and buys 7 more. How many apples?", 19.0, {"expression": "12+7"})
    script = {"tool_caller": ['12+7"}}</tool_call>', "xx"], "verifier": ["19", "5"]}
    role_of = lambda m: "verifier" if m[0]["content"].startswith("Check") else "tool_caller"  # noqa: E731
    tree = copy.deepcopy(smoke_tree)
    tree["env"]["max_turns"], tree["algorithm"]["group_size"] = 1, 2
    for signal, actions in (("deferred", 0), ("turn_end", 2)):
        tree["reward"]["team_signal"] = signal
        spec = parse_spec(tree)
        rollout = tree_rollout(ScriptedTeam(script, role_of), spec, [MathToolEnv(problem, "multi", 1, {})], k=2)
        assert rollout.playout_actions == actions, signal


def test_deferred_roles_are_listed_from_each_envs_declaration():
    """The schema text and docs/credit.md name every env's deferred roles (the team layouts' validators too)."""
    from pathlib import Path

    from pettingllms_cli.envs import ENVS
    from pettingllms_cli.spec import Experiment

    schema = Experiment.model_json_schema()["$defs"]["RewardSpec"]["properties"]["team_signal"]["description"]
    docs = " ".join((Path(__file__).resolve().parents[1] / "docs" / "credit.md").read_text().split())
    declared = {name: sorted(env.deferred_roles) for name, env in ENVS.items() if env.deferred_roles}
    assert declared["math_tool_v0"] == ["planner", "validator"]  # the `team` layout's planner and validator
    for name, roles in declared.items():
        assert f"{name}: {', '.join(roles)}" in schema
        assert f"`{name}`: {', '.join(roles)}" in docs
