"""Judges' verdicts parse in one fixed form (first word Yes or No); hedges are no verdict, never a send-back."""

from __future__ import annotations

import pytest

from pettingllms_cli.envs import review
from pettingllms_cli.envs.function_call import FunctionCallEnv
from tests.test_showcase_envs import calc, foreign_number, math_env

HEDGES = [
    "No problem, it is right.",
    "Nothing wrong here",
    "Not bad, yes",
    "I am not sure.",
    "The call is not valid",
    "Yesterday's call was fine",
    "",
]


@pytest.mark.parametrize("reply", HEDGES)
def test_a_hedge_is_no_verdict(reply):
    assert review.verdict(reply) is None  # before: "No problem" and "Nothing"/"Not" parsed as a send-back


@pytest.mark.parametrize(
    ("reply", "said"),
    [("Yes.", True), ("yes", True), ("YES!", True), ('"Yes", it runs', True), ("**No**: 8 is not in it.", False)]
    + [("No: 8 is not in the question.", False), ("No.", False), ("  no, it adds the cups", False)],
)
def test_the_fixed_form_is_a_verdict(reply, said):
    assert review.verdict(reply) is said


def test_no_verdict_earns_its_own_reward_whatever_the_case():
    assert review.judged(None, True) == review.judged(None, False) == review.NO_VERDICT
    assert review.NO_VERDICT <= review.JUDGED_WRONG  # dodging never pays more than a wrong verdict


@pytest.mark.parametrize("reply", ["No problem, it is right.", "I am not sure."])
def test_a_math_validator_that_hedges_lets_the_call_run(reply):
    env = math_env()
    env.step("planner", calc(foreign_number(env)))  # invalid: a number the question does not contain
    out = env.step("validator", reply)
    assert env.ran is True and out.info["verdict"] == "ran"  # not sent back
    assert out.local_reward == review.NO_VERDICT
    assert "sent back" not in (env.observe("planner")[-1]["content"])


def test_a_function_call_reader_that_hedges_does_not_send_the_call_back():
    env = FunctionCallEnv(FunctionCallEnv.load_problems("generated", "train", 0, 1)[0], "team", 3)
    env.step("planner", env.reference_action("planner"))
    env.step("validator", "Yes.")
    out = env.step("reader", "Nothing wrong here")
    assert out.info["read"] == "accept" and out.local_reward == review.NO_VERDICT  # the result stands, as documented
