"""The showcase layouts (issue 15): `team` (planner, validator, reader) and `solo` of math_tool_v0 and
function_call_v0. Scripted actions check that the judges are paid for a right judgement, never for
rubber-stamping; that the planner hears the judge's words and never the answer key (the tool's refusals, which the
lone agent hears too: tests/test_fair_layouts.py); that a call sent back before it
ran is not an attempt; that a handed-in answer ends the episode; and that the lone agent gets the
same rounds. One tiny-model training step runs on each new layout."""

from __future__ import annotations

import json
import math

import pytest

from pettingllms_cli.envs.function_call import FunctionCallEnv
from pettingllms_cli.envs.math_tool import MathToolEnv
from pettingllms_cli.tools.calls import ToolCall, render_tool_call
from tests.test_envs_train import train_one_step


def calc(expression: str) -> str:
    return render_tool_call(ToolCall("calculator", {"expression": expression}))


def math_env(layout: str = "team", max_turns: int = 3) -> MathToolEnv:
    problem = MathToolEnv.load_problems("generated", "train", 0, 1)[0]
    return MathToolEnv(problem, layout, max_turns)


def foreign_number(env: MathToolEnv) -> str:
    """The right expression with its last number swapped for one the question does not contain."""
    a, op, b = env.problem.meta["expression"].partition(next(c for c in "+-*/" if c in env.problem.meta["expression"]))
    return f"{a}{op}{int(b) + 991}"


def wrong_op(env: MathToolEnv) -> str:
    """The question's own numbers with the wrong operation: valid parameters, wrong result."""
    expr = env.problem.meta["expression"]
    op = next(c for c in "+-*/" if c in expr)
    return expr.replace(op, "+" if op != "+" else "-")


# --- math_tool_v0 team ----------------------------------------------------------------------------------
def test_math_validator_that_rubber_stamps_an_invalid_call_earns_less_than_one_that_sends_it_back():
    stamped, judged = math_env(), math_env()
    for env in (stamped, judged):
        env.step("planner", calc(foreign_number(env)))
    rubber = stamped.step("validator", "Yes.")
    back = judged.step("validator", "No: a number is not in the question.")
    assert back.local_reward > rubber.local_reward
    heard = judged.observe("planner")[-2]["content"]
    assert 'the validator, who said: "No: a number is not in the question."' in heard  # the judge's words
    assert "991" not in heard.split("sent back")[1]  # not the answer key's diagnosis of the foreign number
    assert judged.ran is False and stamped.ran is True  # sent back: it never reached the calculator


def test_math_validator_that_sends_back_a_valid_call_earns_less_than_one_that_lets_it_run():
    ran, back = math_env(), math_env()
    for env in (ran, back):
        env.step("planner", env.reference_action("planner"))
    assert ran.step("validator", "Yes.").local_reward > back.step("validator", "No.").local_reward
    heard = back.observe("planner")[-2]["content"]
    assert "right" not in heard and 'who said: "No."' in heard  # a wrong verdict is not corrected by the answer key


def test_math_validator_no_op_lets_the_call_run_unpaid():
    env = math_env()
    env.step("planner", env.reference_action("planner"))
    result = env.step("validator", "")  # the no-op: the team without a validator
    assert env.ran and result.local_reward == 0.0


def test_math_reader_that_accepts_a_wrong_result_earns_less_than_one_that_asks_for_a_retry():
    accepted, retried = math_env(), math_env()
    for env in (accepted, retried):
        env.step("planner", calc(wrong_op(env)))
        env.step("validator", "Yes.")  # the question's numbers: valid parameters
    took = accepted.step("reader", "Yes.")
    back = retried.step("reader", "No: it should subtract.")
    assert back.local_reward > took.local_reward
    assert accepted.done and not accepted.success  # a handed-in wrong answer ends the episode
    assert not retried.done and '"No: it should subtract."' in retried.observe("planner")[-2]["content"]


def test_math_reader_that_sends_back_a_right_result_earns_less_and_the_planner_is_not_told_it_was_right():
    accepted, retried = math_env(), math_env()
    for env in (accepted, retried):
        env.step("planner", env.reference_action("planner"))
        env.step("validator", "Yes.")
    assert accepted.step("reader", "Yes.").local_reward > retried.step("reader", "No.").local_reward
    assert accepted.success and accepted.attempts == 1
    heard = retried.observe("planner")[-2]["content"]
    assert "sent back by the reader" in heard and "right" not in heard.split("Question:")[-1]


def test_math_call_sent_back_is_not_an_attempt_but_one_that_ran_is():
    env = math_env()
    env.step("planner", calc(foreign_number(env)))
    env.step("validator", "No.")
    env.step("reader", "Yes.")  # nothing ran: nothing to read, no attempt
    env.step("planner", calc(wrong_op(env)))
    env.step("validator", "Yes.")
    env.step("reader", "No.")  # ran and read: one attempt
    for role in env.roles:
        env.step(role, env.reference_action(role))
    assert env.success and env.attempts == 2 and env.turn == 3


def test_math_solo_gets_the_planner_prompt_and_the_same_rounds():
    solo, team = math_env("solo"), math_env("team")
    assert solo.observe("solver") == team.observe("planner")
    for _ in range(2):  # a refused call is retried with the calculator's error
        solo.step("solver", calc("1/0"))
        assert not solo.done
    assert "Your last call failed" in solo.observe("solver")[-2]["content"]
    solo.step("solver", solo.reference_action("solver"))
    assert solo.success and solo.attempts == 3 and solo.turn == 3  # 3 rounds, as the team's max_turns
    once = math_env("solo")
    once.step("solver", calc(wrong_op(once)))  # a call that runs is the answer handed in
    assert once.done and not once.success


# --- function_call_v0 team --------------------------------------------------------------------------------
def fc_env(layout: str = "team", max_turns: int = 3) -> FunctionCallEnv:
    problem = FunctionCallEnv.load_problems("generated", "train", 0, 1)[0]
    return FunctionCallEnv(problem, layout, max_turns)


def missing_required(env: FunctionCallEnv) -> str:
    name, args = next(iter(env.gold[0].items()))
    return render_tool_call(ToolCall(name, {}))


def test_function_call_validator_paid_for_the_schema_judgement():
    stamped, judged = fc_env(), fc_env()
    for env in (stamped, judged):
        env.step("planner", missing_required(env))
    rubber = stamped.step("validator", "Yes.")
    back = judged.step("validator", "No: an argument is missing.")
    assert back.local_reward > rubber.local_reward
    heard = judged.observe("planner")[-2]["content"]
    assert '"No: an argument is missing."' in heard  # its words
    assert "Your last call was rejected: missing required argument" in heard  # and the tool's, as the lone caller hears


def test_function_call_reader_that_accepts_a_wrong_call_earns_less_than_a_retry():
    accepted, retried = fc_env(), fc_env()
    for env in (accepted, retried):
        env.step("planner", env.corrupted_actions("planner")[1])  # the right function, a wrong value: fits the schema
        env.step("validator", "Yes.")
    took = accepted.step("reader", "Yes.")
    back = retried.step("reader", "No: a value is off.")
    assert back.local_reward > took.local_reward
    assert accepted.done and not accepted.success
    heard = retried.observe("planner")[-2]["content"]
    assert '"No: a value is off."' in heard and "wrong value" not in heard  # the reader's words, not the answer key's


def test_function_call_solo_retries_a_call_that_does_not_fit_the_schema():
    env = fc_env("solo")
    env.step("caller", missing_required(env))
    assert not env.done and "missing required argument" in env.observe("caller")[-2]["content"]
    env.step("caller", env.reference_action("caller"))
    assert env.success and env.attempts == 2


@pytest.mark.parametrize("env_cls", [MathToolEnv, FunctionCallEnv])
def test_every_new_role_has_a_no_op_and_the_waiting_roles_are_deferred(env_cls):
    assert {"planner", "validator"} <= env_cls.deferred_roles
    assert not {"planner", "validator", "reader"} & env_cls.no_noop_roles
    problem = env_cls.load_problems("generated", "train", 0, 1)[0]
    env = env_cls(problem, "team", 3)
    while not env.done:  # the empty action is a step with finite rewards for every role
        result = env.step(env.current_role, "")
        assert math.isfinite(result.local_reward) and result.team_reward == 0.0
    json.dumps(env.state())


# --- one tiny-model training step on each new layout ------------------------------------------------------
@pytest.mark.parametrize(("env", "layout"), [(e, lay) for e in ("math_tool_v0", "function_call_v0") for lay in ("team", "solo")])
def test_one_training_step_on_the_showcase_layouts(smoke_tree, tmp_path, env, layout):
    agents, rows = train_one_step(smoke_tree, tmp_path / "run", env, layout, max_turns=2, max_new_tokens=4)
    assert [r["step"] for r in rows] == [1] and rows[0]["tokens_generated"] > 0
    assert all(math.isfinite(rows[0][f"loss/{role}"]) for role in agents)


# --- tool_call_validity counts what ran as valid -----------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["single", "solo"])
def test_function_call_validity_counts_a_call_that_ran_as_valid_and_a_refused_one_as_not(layout):
    from pettingllms_cli.analysis.evaluate import tool_call_validity

    problem = FunctionCallEnv.load_problems("generated", "train", 0, 1)[0]
    env = FunctionCallEnv(problem, layout, 2)
    role = env.roles[0]
    env.step(role, "I would call the weather tool.")  # no <tool_call>: refused
    env.step(role, env.reference_action(role))  # the gold call runs
    assert tool_call_validity([env.transcript]) == {f"tool_call_validity/{role}": 0.5}


def test_a_validator_that_lets_a_call_run_logs_it_as_valid():
    from pettingllms_cli.analysis.evaluate import tool_call_validity

    env = math_env()
    env.step("planner", env.reference_action("planner"))
    env.step("validator", "Yes.")
    assert tool_call_validity([env.transcript]) == {"tool_call_validity/validator": 1.0}


def test_a_call_followed_by_a_broken_block_runs_and_logs_only_the_call():
    """Whatever follows the first call cannot crash the step: a malformed second block is not part of what ran."""
    problem = FunctionCallEnv.load_problems("generated", "train", 0, 1)[0]
    env = FunctionCallEnv(problem, "single", 2)
    call = env.reference_action("caller")
    info = env.step("caller", call + ' <tool_call>{"name": ').info
    assert info["tool_call"] == call and len(info["calls"]) == 1
