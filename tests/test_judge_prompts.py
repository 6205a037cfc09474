"""Each judge is told the one verdict form review.verdict reads, and its worked examples are in that form."""

from __future__ import annotations

import re

import pytest

from pettingllms_cli.envs import function_call, math_tool
from pettingllms_cli.envs.review import verdict


@pytest.mark.parametrize("env", [math_tool, function_call])
def test_the_judges_are_asked_for_the_verdict_form_and_shown_it(env) -> None:
    for system, ask, shots in (
        (env.VALIDATOR_SYSTEM, env.VALIDATOR_ASK, env.VALIDATOR_SHOTS),
        (env.READER_SYSTEM, env.READER_ASK, env.READER_SHOTS),
    ):
        for text in (system, ask):
            told = re.findall(r'"(.+?)"', text)  # the replies the judge is told to give
            assert [verdict(t.replace("<why>", "it is wrong")) for t in told] == [True, False], text
            assert "answer yes or no" not in text.lower(), text
        assert [verdict(reply) for _, reply in shots] == [True, False]


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
