"""The `team` and `solo` layouts hear the same facts (issue 28, item 4): a call the tool refuses reaches its writer's
next attempt with the tool's own error, word for word the same in both arms, whether the validator let it through
(the team's episode goes on, as the lone agent's does) or rightly sent it back (the planner hears the judge's words
and the tool's). A call the tool runs gives no tool error to either arm."""

from __future__ import annotations

import pytest

from pettingllms_cli.envs import ENVS
from pettingllms_cli.envs.base import TurnEnv
from pettingllms_cli.tools.calls import ToolCall, render_tool_call

SOLO_ROLE = {"math_tool_v0": "solver", "function_call_v0": "caller"}


def env(name: str, layout: str) -> TurnEnv:
    cls = ENVS[name]
    return cls(cls.load_problems("generated", "train", 0, 1)[0], layout, 3)


def refused_call(e: TurnEnv) -> tuple[str, str]:
    """A call the tool refuses, and the tool's own error for it."""
    if e.name == "math_tool_v0":
        return render_tool_call(ToolCall("calculator", {"expression": "12/0"})), "division by zero"
    name = next(iter(e.gold[0]))
    required = e.problem.meta["functions"][0]["parameters"]["required"][0]
    return render_tool_call(ToolCall(name, {})), f"missing required argument {required!r}"


def heard(e: TurnEnv, role: str) -> str:
    """What `role` is told about the last round: the feedback line of its last user turn ('' when none)."""
    last_user = e.observe(role)[-2]["content"]  # before the prefilled reply
    return next((line for line in last_user.split("\n") if line.startswith("Your ")), "")


def lone_line(name: str) -> str:
    """What the lone agent hears after the refused call: its whole feedback line."""
    solo = env(name, "solo")
    call, error = refused_call(solo)
    solo.step(SOLO_ROLE[name], call)
    line = heard(solo, SOLO_ROLE[name])
    assert error in line and not solo.done  # the lone agent retries, told the tool's error
    return line


@pytest.mark.parametrize("name", sorted(SOLO_ROLE))
def test_a_call_the_validator_approves_and_the_tool_refuses_goes_back_with_the_tools_error(name):
    team = env(name, "team")
    team.step("planner", refused_call(team)[0])
    team.step("validator", "Yes.")
    read = team.step("reader", "Yes.")  # before: the reader's "Yes." handed the refused call in, ending the episode
    assert not team.done and not team.handed_in and read.team_reward == 0.0
    assert read.info["read"] == "refused"
    assert heard(team, "planner") == lone_line(name)  # the same line in both arms
    team.step("planner", team.reference_action("planner"))  # the team gets its retry, as the lone agent does
    team.step("validator", "Yes.")
    team.step("reader", "Yes.")
    assert team.success and team.attempts == 2  # the refused call went to the tool: an attempt, as in `solo`


@pytest.mark.parametrize("name", sorted(SOLO_ROLE))
def test_a_right_send_back_of_a_call_the_tool_would_refuse_carries_the_tools_error(name):
    team = env(name, "team")
    team.step("planner", refused_call(team)[0])
    back = team.step("validator", "No: wrong.")
    assert back.info["verdict"] == "sent back" and back.info["valid"] is False  # a right send-back
    told = heard(team, "planner")
    assert 'the validator, who said: "No: wrong."' in told  # the judge's words
    assert told.endswith(lone_line(name))  # and the tool's, as the lone agent hears them after the same call


@pytest.mark.parametrize("name", sorted(SOLO_ROLE))
def test_a_call_the_tool_runs_gives_no_tool_error_to_either_arm(name):
    team, solo = env(name, "team"), env(name, "solo")
    team.step("planner", team.reference_action("planner"))
    team.step("validator", "No.")  # a wrong send-back: the tool would have run it
    told = heard(team, "planner")
    assert "failed" not in told and "rejected" not in told
    solo.step(SOLO_ROLE[name], solo.reference_action(SOLO_ROLE[name]))
    assert solo.success  # ran and handed in: nothing to be told
