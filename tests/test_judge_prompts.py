"""Each judge is told the one verdict form review.verdict reads, its worked examples are in that form, and an
example's reason, copied word for word, says nothing false about the case the judge is looking at."""

from __future__ import annotations

import re

import pytest

from pettingllms_cli.envs import function_call, math_tool
from pettingllms_cli.envs.math_tool import MathToolEnv
from pettingllms_cli.envs.review import Judge, verdict

JUDGES = [math_tool.VALIDATOR, math_tool.READER, function_call.VALIDATOR, function_call.READER]
# Words by which a reason speaks of the case in front of the judge: copied into another case, such a reason
# becomes a claim about that case ("8 is not in the question" for a question that holds an 8).
CURRENT_CASE = re.compile(r"\b(the (question|request|call|result|function)|it|this|that)\b", re.IGNORECASE)


def speaks_of_the_current_case(reason: str) -> bool:
    return bool(CURRENT_CASE.search(reason))


def numbers_and_names(text: str) -> set[str]:
    return set(re.findall(r"\d+(?:\.\d+)?|[a-z]+_[a-z_]+", text))


@pytest.mark.parametrize("judge", JUDGES)
def test_the_judges_are_asked_for_the_verdict_form_and_shown_it(judge: Judge) -> None:
    for text in (judge.system, judge.ask):
        told = re.findall(r'"(.+?)"', text)  # the replies the judge is told to give
        assert [verdict(t.replace("<why>", "it is wrong")) for t in told] == [True, False], text
        assert "answer yes or no" not in text.lower(), text
    assert [verdict(reply) for _, reply in judge.shots] == [True, False]


@pytest.mark.parametrize("judge", JUDGES)
def test_an_example_reason_speaks_only_of_its_own_example(judge: Judge) -> None:
    for case, reply in judge.shots:
        reason = reply.removeprefix("No:").removeprefix("Yes.")
        assert not speaks_of_the_current_case(reason), reply
        assert numbers_and_names(reason) <= numbers_and_names(case), reply  # grounded in its own example


def test_the_old_reason_was_false_for_questions_that_hold_its_number() -> None:
    """What the check above catches: the old example reason, copied for a question with an 8, was a false claim."""
    old = "No: 8 is not in the question."
    problems = MathToolEnv.load_problems("generated", "train", 0, 200)
    holding_8 = [p for p in problems if "8" in re.findall(r"\d+", p.question)]
    assert holding_8 and speaks_of_the_current_case(old)
    for problem in holding_8:  # the new reason is true whatever the question: 8 is neither 30 nor 4
        env = MathToolEnv(problem, "team", 2)
        env.step("planner", env.reference_action("planner"))
        prompt = "\n".join(m["content"] for m in env.observe("validator"))
        assert old not in prompt and "No: 8 is not 30 or 4." in prompt


@pytest.mark.parametrize("name", ["math_tool_v0", "function_call_v0"])
def test_a_judges_prompt_is_not_prefilled_so_its_first_word_is_the_verdict(name) -> None:
    from pettingllms_cli.envs import ENVS

    cls = ENVS[name]
    env = cls(cls.load_problems("generated", "train", 0, 1)[0], "team", 2)
    env.step("planner", env.reference_action("planner"))
    for role in ("validator", "reader"):
        messages = env.observe(role)
        assert messages[-1]["role"] == "user" and messages[-1]["content"].endswith('Reply "Yes." or "No: <why>."')
        env.step(role, env.reference_action(role))
