"""Every observation has a bound: a tool result, judge reply or other agent's message reaches the next prompt cut
to OBSERVATION_CHARS with a visible mark, and a prompt never exceeds the model's context."""

from __future__ import annotations

import pytest
import torch

from pettingllms_cli.envs.base import Problem
from pettingllms_cli.envs.messages import OBSERVATION_CHARS, bounded
from pettingllms_cli.envs.sql_query import SqlEnv
from pettingllms_cli.models.tiny import tiny_tokenizer
from pettingllms_cli.policy import prompts
from pettingllms_cli.spec import parse_spec
from pettingllms_cli.tools.calls import ToolCall, render_tool_call

ZEROBLOBS = "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c LIMIT 20) SELECT zeroblob(1000000) FROM c"


def conversation(tool_result: str) -> list[dict]:
    return [
        {"role": "system", "content": "You answer."},
        {"role": "user", "content": f"Result: {tool_result}"},
        {"role": "assistant", "content": "Answer: "},
    ]


def test_a_huge_tool_result_is_cut_and_marked():
    messages = bounded(conversation("x" * 3_200_000))
    assert len(messages[1]["content"]) <= OBSERVATION_CHARS and messages[1]["content"].endswith("3.2 MB cut")
    assert messages[0] == {"role": "system", "content": "You answer."} and messages[2]["content"] == "Answer: "


def test_short_messages_are_untouched():
    messages = conversation("42")
    assert bounded(messages) == messages


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


def test_a_prompt_fits_its_budget_and_keeps_the_system_prompt_and_the_newest_message(tokenizer):
    history = [{"role": "system", "content": "SYSTEM RULES"}]
    for turn in range(12):
        history += [{"role": "user", "content": f"turn {turn}: " + "old words " * 300}, {"role": "assistant", "content": "ok"}]
    history += [{"role": "user", "content": "NEWEST QUESTION"}]
    full = prompts.encode(tokenizer, history, None)
    ids = prompts.encode(tokenizer, history, None, max_tokens=400)
    assert len(full) > 400 >= len(ids)
    text = tokenizer.decode(ids)
    assert "SYSTEM RULES" in text and "NEWEST QUESTION" in text and "cut]" in text


def test_one_message_longer_than_the_context_keeps_the_newest_tokens(tokenizer):
    messages = [{"role": "user", "content": "word " * 1500 + "THE END"}]  # under the per-message cap
    ids = prompts.encode(tokenizer, messages, None, max_tokens=64)
    assert len(ids) == 64 and "THE END" in tokenizer.decode(ids)


def test_a_fitting_prompt_is_unchanged(tokenizer):
    messages = conversation("42")
    assert prompts.encode(tokenizer, messages, None, max_tokens=10_000) == prompts.encode(tokenizer, messages, None)


def test_twenty_zeroblobs_reach_the_reporter_bounded_and_a_forward_pass_finishes(smoke_tree):
    """The hostile pass's query: its rendering stays under the SQL cap, and the reporter's prompt in a real team
    fits the context, so the forward pass over it runs (it once tried to allocate 40 GB)."""
    problem: Problem = SqlEnv.load_problems("generated", "train", 0, 1)[0]
    env = SqlEnv(problem, layout="multi")
    env.step("query_writer", render_tool_call(ToolCall("sql", {"query": ZEROBLOBS})))
    observation = env.observe("reporter")
    assert "1.0 MB blob cut" in observation[1]["content"] and len(observation[1]["content"]) <= OBSERVATION_CHARS

    from pettingllms_cli.policy.adapters import Team

    smoke_tree["env"] = {"name": "sql_v0", "layout": "multi", "data": "generated", "max_turns": 1, "eval_problems": 1}
    smoke_tree["agents"] = {
        "writer": {"model": "tiny", "roles": ["query_writer"], "lora": {"r": 4, "alpha": 8}},
        "reporter": {"model": "tiny", "roles": ["reporter"], "lora": {"r": 4, "alpha": 8}},
    }
    team = Team(parse_spec(smoke_tree))
    huge = [*observation[:1], {"role": "user", "content": "x" * 3_000_000}, observation[-1]]  # past any cap but bounded's
    for messages in (observation, huge):
        ids = team.encode("reporter", messages)
        assert len(ids) <= team.prompt_budget("reporter")
        with torch.no_grad():
            logits = team.activate("reporter")(input_ids=torch.tensor([ids])).logits
        assert torch.isfinite(logits).all()
