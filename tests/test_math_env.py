"""math_tool_v0: rewards, turn order, termination, malformed actions never crash."""

from __future__ import annotations

import json

import pytest

from pettingllms_cli.envs import ENVS
from pettingllms_cli.envs.math_tool import CALL_PREFIX, MathToolEnv, generate_problems
from pettingllms_cli.errors import UserError
from pettingllms_cli.tools.calculator import CalculatorError, calculate


def _env(layout="multi", max_turns=2, **options):
    problem = generate_problems(seed=3, n=1, prefix="t")[0]
    return MathToolEnv(problem, layout, max_turns, options)


def test_reference_actions_solve_and_score():
    env = _env()
    res = env.step("tool_caller", env.reference_action("tool_caller"))
    assert (res.team_reward, res.local_reward, res.terminated) == (1.0, 0.1, False)
    res = env.step("verifier", env.reference_action("verifier"))
    assert (res.team_reward, res.local_reward, res.terminated) == (1.0, 1.0, True)
    assert env.success and env.attempts == 1


@pytest.mark.parametrize(
    "text",
    [
        "",
        "no call",
        CALL_PREFIX + "2+",
        CALL_PREFIX + '__import__(\\"os\\")"}}</tool_call>',
        '<tool_call>{"name": "rm", "arguments": {}}</tool_call>',
        "<tool_call>[1, 2]</tool_call>",
        "<tool_call>" + "[" * 5000 + "</tool_call>",
    ],
)
def test_malformed_calls_are_penalties(text):
    env = _env()
    res = env.step("tool_caller", text)
    assert res.local_reward == -0.1 and res.team_reward == 0.0
    assert "tool_error" in res.info


def test_wrong_answer_retries_then_truncates():
    env = _env(max_turns=2)
    env.step("tool_caller", CALL_PREFIX + '1+1"}}</tool_call>')
    res = env.step("verifier", "Answer: 2")
    assert not res.terminated and not res.truncated
    assert "was wrong" in env.observe("tool_caller")[-2]["content"]
    env.step("tool_caller", CALL_PREFIX + '1+1"}}</tool_call>')
    res = env.step("verifier", "Answer: 2")
    # Unsolved: no attempts figure (it is not "solved at the last attempt"); two attempts were made.
    assert res.truncated and not env.success and env.attempts is None and env.attempts_made == 2


def test_unsolved_and_solved_at_the_last_attempt_differ():
    from pettingllms_cli.rollout.coordination import Play
    from pettingllms_cli.rollout.episodes import episode_metrics, record

    wrong = CALL_PREFIX + '1+1"}}</tool_call>'
    unsolved, last = _env(layout="single", max_turns=2), _env(layout="single", max_turns=2)
    for env, second in ((unsolved, wrong), (last, last.reference_action("solver"))):
        env.step("solver", wrong)
        env.step("solver", second)
    assert (unsolved.attempts, last.attempts) == (None, 2)
    m_unsolved, m_last = episode_metrics([record(Play(unsolved))]), episode_metrics([record(Play(last))])
    assert (m_unsolved["team_success_rate"], m_unsolved["mean_attempts_to_success"]) == (0.0, None)
    assert (m_last["team_success_rate"], m_last["mean_attempts_to_success"]) == (1.0, 2.0)
    assert m_unsolved != m_last


def test_a_team_round_is_one_attempt():
    env = _env(layout="multi", max_turns=2)
    env.step("tool_caller", CALL_PREFIX + '1+1"}}</tool_call>')
    assert env.attempts_made == 0  # the call alone is not the round's answer
    env.step("verifier", "Answer: 2")
    env.step("tool_caller", env.reference_action("tool_caller"))
    env.step("verifier", env.reference_action("verifier"))
    assert env.success and env.attempts == 2


def test_turn_order_is_enforced():
    with pytest.raises(ValueError, match="turn"):
        _env().step("verifier", "Answer: 1")


def test_copy_is_independent():
    env = _env()
    branch = env.copy()
    branch.step("tool_caller", branch.reference_action("tool_caller"))
    assert env.turn == 0 and env.transcript == [] and env.current_role == "tool_caller"


def test_single_layout_solver_answers_with_the_tool():
    env = _env("single", 1)
    assert env.roles == ("solver",)
    res = env.step("solver", env.reference_action("solver"))
    assert res.terminated and env.success


def test_format_bonus_only_for_numbers():
    assert _env(format_bonus=0.2).step("tool_caller", "x").local_reward == pytest.approx(-0.1)
    assert _env(format_bonus=0.2).step("tool_caller", CALL_PREFIX + "2+").local_reward == pytest.approx(-0.1 + 0.2)


def test_generated_problems_are_seeded_and_split():
    a = MathToolEnv.load_problems("generated", "train", 0, 5)
    assert a == MathToolEnv.load_problems("generated", "train", 0, 5)
    test = MathToolEnv.load_problems("generated", "test", 0, 5)
    assert {p.question for p in a}.isdisjoint({p.question for p in test})


def test_gsm8k_file(tmp_path):
    path = tmp_path / "g.jsonl"
    path.write_text("\n".join(json.dumps({"question": f"q{i}", "answer": f"so #### {i}"}) for i in range(10)))
    train = MathToolEnv.load_problems(str(path), "train", 0, 100)
    test = MathToolEnv.load_problems(str(path), "test", 0, 100)
    assert len(train) == 8 and len(test) == 2 and test[0].answer == 8.0
    path.write_text('{"question": "q"}\n')
    with pytest.raises(UserError, match="record 1"):
        MathToolEnv.load_problems(str(path), "train", 0, 1)


def test_registry_has_math():
    assert ENVS["math_tool_v0"] is MathToolEnv


@pytest.mark.parametrize("expr", ["9**9**9", "10**100", "1/0", "a+1", "().__class__", "x" * 300])
def test_calculator_refuses_unsafe(expr):
    with pytest.raises(CalculatorError):
        calculate(expr)
