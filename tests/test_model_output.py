"""Nothing a model writes crashes a run (issue 17, item 1).

Every hostile reply below once raised out of an env's `step` (OverflowError from the calculator,
ValueError from a 5,000-digit JSON integer, UnicodeEncodeError from a lone surrogate in code,
RecursionError when tree sampling deep-copied a deeply nested call). Now each ends as an action
with finite rewards and a JSON-serialisable state. `tests/test_fuzz.py` fuzzes the same contract.
"""

from __future__ import annotations

import json
import math

import pytest

from pettingllms_cli.envs import ENVS
from pettingllms_cli.envs.math_tool import CALL_PREFIX, MathToolEnv, parse_number
from pettingllms_cli.tools.calculator import CalculatorError, calculate
from pettingllms_cli.tools.calls import ToolCall, parse_tool_call
from pettingllms_cli.tools.sandbox import run_python

BIG_INT = "9" * 5000  # past Python's 4,300-digit int-str limit


def raw_call(name: str, key: str, raw_json: str) -> str:
    """A tool call whose one argument is `raw_json`, pasted in as JSON text."""
    return '<tool_call>{"name": "' + name + '", "arguments": {"' + key + '": ' + raw_json + "}}</tool_call>"


def calc_call(expression: str) -> str:
    return raw_call("calculator", "expression", json.dumps(expression))


@pytest.mark.parametrize("expression", ["1e5**64", "1e300**2", "1e999", "1e999-1e999", "-1e999*0", "(1e16)-1e16+1"])
def test_calculator_overflow_and_non_finite_are_calculator_errors(expression: str) -> None:
    with pytest.raises(CalculatorError, match="out of range"):
        calculate(expression)


def test_calculator_still_computes() -> None:
    assert calculate("2**10") == 1024 and calculate("7/2") == 3.5 and calculate("-(3*4)") == -12


@pytest.mark.parametrize(
    "body",
    [
        '{"name": "calculator", "arguments": {"expression": ' + BIG_INT + "}}",
        '{"name": "calculator", "arguments": {"expression": NaN}}',
        '{"name": "calculator", "arguments": {"expression": 1e999}}',
        '{"name": "f", "arguments": {"a": ' + "[" * 900 + "]" * 900 + "}}",
        "[" * 100_000,
    ],
)
def test_unusable_json_is_an_error_string(body: str) -> None:
    result = parse_tool_call(f"<tool_call>{body}</tool_call>")
    assert isinstance(result, str), result


def test_moderate_nesting_is_still_a_call() -> None:
    call = parse_tool_call('<tool_call>{"name": "f", "arguments": {"a": [[1, 2], {"b": [3]}]}}</tool_call>')
    assert call == ToolCall("f", {"a": [[1, 2], {"b": [3]}]})


def test_a_verifier_number_past_float_range_is_no_answer() -> None:
    assert parse_number("Answer: " + "9" * 400) is None and parse_number("Answer: 12") == 12.0


def test_sandbox_takes_a_lone_surrogate() -> None:
    result = run_python("print('a\ud800b')")
    assert result.ok and result.stdout == "a?b\n"


HOSTILE = [
    calc_call("1e5**64"),
    calc_call("1e300**2"),
    calc_call("1e999-1e999"),
    CALL_PREFIX + '9**9**9"}}</tool_call>',
    raw_call("calculator", "expression", BIG_INT),
    raw_call("sql", "query", BIG_INT),
    '<tool_call>{"name": "calculator", "arguments": {"expression": NaN}}</tool_call>',
    "Answer: " + "9" * 400,
    "```python\nprint('\ud800')\n```",
    "\ud800\udfff",
    "\x00" * 8,
    "Moves: " + "U " * 2000,
    "```python\n" + "(" * 5000 + "\n```",
]


def deep_call(env_cls: type, problem: object) -> str:
    """A deeply nested call to a function the problem offers (function_call_v0 logs its arguments)."""
    functions = getattr(problem, "meta", {}).get("functions") or [{"name": "calculator"}]
    return raw_call(functions[0]["name"], "a", "[" * 900 + "]" * 900)


@pytest.mark.parametrize("env_name", sorted(ENVS))
def test_hostile_replies_are_steps_with_finite_rewards(env_name: str) -> None:
    env_cls = ENVS[env_name]
    problem = env_cls.load_problems("generated", "train", 0, 1)[0]
    for layout, roles in env_cls.layouts.items():
        for text in [*HOSTILE, deep_call(env_cls, problem)]:
            for role in roles:
                env = env_cls(problem, layout, 2)
                while env.current_role != role:
                    env.step(env.current_role, "")
                result = env.step(role, text)
                assert math.isfinite(result.local_reward) and math.isfinite(result.team_reward), (layout, role, text[:40])
                env.copy()  # tree sampling deep-copies the env after every action
                json.dumps(env.state(), allow_nan=False)


def test_overflow_is_a_failed_call_with_the_penalty() -> None:
    env = MathToolEnv(MathToolEnv.load_problems("generated", "train", 0, 1)[0], "multi", 2)
    result = env.step("tool_caller", calc_call("1e5**64"))
    assert result.local_reward < 0 and result.team_reward == 0.0 and "out of range" in result.info["tool_error"]


@pytest.mark.parametrize("query", ["SELECT randomblob(1000000000)", "SELECT printf('%.*c', 1000000000, 'x')"])
def test_a_huge_sql_value_is_a_fast_failed_query(query: str) -> None:
    """One function call that builds a gigabyte never reaches the progress handler: it ran for minutes."""
    import time

    from pettingllms_cli.envs.sql_query import SqlEnv

    env = SqlEnv(SqlEnv.load_problems("generated", "train", 0, 1)[0], "single", 2)
    began = time.monotonic()
    result = env.step("analyst", raw_call("sql", "query", json.dumps(query)))
    assert time.monotonic() - began < 5 and result.local_reward < 0 and result.info["tool_error"]
