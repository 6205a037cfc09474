"""Rewards that measure the job (issue 16): tester, verifier, retry feedback, distillation targets."""

from __future__ import annotations

from dataclasses import replace

import torch

from pettingllms_cli.algorithms.distill import best_trajectories, encode_pair
from pettingllms_cli.envs.base import Problem
from pettingllms_cli.envs.code import CODE_PREFIX, CodeEnv, mutants
from pettingllms_cli.envs.math_tool import CALL_PREFIX, MathToolEnv
from pettingllms_cli.rollout.records import Sample
from tests.samples import caller_sample

ADD_ONE = Problem(
    "add_one",
    "Write a function add_one(x) that returns x plus one.",
    None,
    {
        "entry": "add_one",
        "tests": ["assert add_one(1) == 2", "assert add_one(5) == 6"],
        "reference": "def add_one(x):\n    return x + 1\n",
        "setup": "",
        "reference_asserts": ["assert add_one(1) == 2", "assert add_one(5) == 6"],
        "example_shown": False,
    },
)


def _tester(text: str) -> float:
    env = CodeEnv(ADD_ONE, "multi", 1, {})
    return env.step("tester", CODE_PREFIX + text + "\n```").local_reward


def test_mutants_are_the_four_wrong_programs():
    wrong = CodeEnv(ADD_ONE, "multi", 1, {}).wrong_programs
    assert len(mutants(ADD_ONE.meta["reference"], "add_one")) == len(wrong) == 4  # each fails a hidden test


def test_a_weak_tester_earns_less_than_one_that_separates_the_reference_from_its_mutants():
    weak = _tester("assert add_one(1) is not None")  # catches only the empty body
    separating = _tester("assert add_one(1) == 2")  # fails x + 2, x - 1, return 0 and pass
    wrong = _tester("assert add_one(1) == 3")  # fails the reference itself
    assert separating == 1.0 and 0 < weak < separating and wrong == 0.0


def test_the_coder_sees_the_testers_tests_and_wrong_tests_do_not_count():
    env = CodeEnv(ADD_ONE, "multi", 2, {})
    env.step("tester", CODE_PREFIX + "assert add_one(1) == 2\nassert add_one(1) == 3\n```")
    assert "assert add_one(1) == 2" in env.observe("coder")[1]["content"]
    res = env.step("coder", CODE_PREFIX + "def add_one(x):\n    return x + 2\n```")
    assert res.local_reward == 0.0  # it failed the one valid test; the invalid one says nothing
    assert "assert add_one(1) == 2" in env.observe("coder")[1]["content"].rsplit("\n", 1)[-1]  # the retry names it


def _math(expression: str) -> MathToolEnv:
    env = MathToolEnv(Problem("p", "Tom has 12 apples and buys 7 more. How many?", 19.0, {"expression": "12+7"}), "multi", 2)
    env.step("tool_caller", CALL_PREFIX + expression + '"}}</tool_call>')
    return env


def test_copying_a_wrong_calculator_result_earns_less_than_rejecting_it():
    copied = _math("12-7").step("verifier", "Answer: 5")
    rejected = _math("12-7").step("verifier", "Answer: retry")
    assert copied.local_reward < rejected.local_reward
    assert (
        _math("12+7").step("verifier", "Answer: 19").local_reward > _math("12+7").step("verifier", "Answer: retry").local_reward
    )


def test_the_callers_retry_is_not_told_a_right_call_was_wrong():
    env = _math("12+7")
    env.step("verifier", "Answer: retry")
    note = env.observe("tool_caller")[-2]["content"]
    assert "was wrong" not in note and "was right" in note and "rejected" in note
    env = _math("12-7")
    env.step("verifier", "Answer: 5")
    assert "12-7 = 5 was wrong" in env.observe("tool_caller")[-2]["content"]


def _sample(text: str, reward: float, success: bool, ids: list[int]) -> Sample:
    return caller_sample(
        group=("p0",), completion=torch.tensor(ids), text=text, reward=reward, team_reward=reward, team_success=success
    )


def test_distillation_keeps_only_untruncated_samples_that_led_to_success():
    right, wrong, cut = _sample("a", 1.0, True, [4, 2]), _sample("b", 1.1, False, [5, 2]), _sample("c", 1.2, True, [6, 7])
    assert best_trajectories([right, wrong, cut], "caller", 3, truncated={2}) == [right]
    assert best_trajectories([right, wrong], "caller", 3, require_success=False) == [wrong, right]


def test_a_truncated_sample_gets_no_eos(smoke_spec):
    from pettingllms_cli.policy.adapters import Team

    team = Team(smoke_spec)
    eos = team.tokenizer_of("caller").eos_token_id
    messages = [{"role": "user", "content": "What is 2+3?"}]
    ended, cut = (replace(_sample("5", 1.0, True, ids), messages=messages) for ids in ([7, eos], [7, 8]))
    assert int(encode_pair(team, "verifier", ended)[1][0, -1]) == eos
    assert int(encode_pair(team, "verifier", cut)[1][0, -1]) != eos


def test_sql_reporter_copying_a_wrong_first_cell_earns_less_than_rejecting_it():
    from pettingllms_cli.envs.sql_query import CALL_PREFIX as SQL_PREFIX
    from pettingllms_cli.envs.sql_query import SqlEnv

    problem = SqlEnv.load_problems("generated", "train", 0, 1, {})[0]

    def after(query: str) -> SqlEnv:
        env = SqlEnv(problem, "multi", 2, {})
        env.step("query_writer", SQL_PREFIX + query + '"}}</tool_call>')
        return env

    wrong = "12345678"  # SELECT 12345678: a first cell that is not the answer
    copied, rejected = (after(wrong).step("reporter", f"Answer: {text}").local_reward for text in (wrong, "retry"))
    assert copied < rejected
    env = after(problem.meta["sql"].removeprefix("SELECT "))
    assert env.step("reporter", "Answer: retry").local_reward == 0.0  # rejecting a right result is wrong
    assert "which was right, but the reporter rejected it" in env.observe("query_writer")[-2]["content"]
