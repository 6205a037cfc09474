"""Our envs as PettingZoo AEC envs over text actions pass PettingZoo's own `api_test` (issue 30 item 6)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pettingzoo", reason="the PettingZoo adapter's tests need the dev extra (pettingzoo)")

from pettingzoo.test import api_test  # noqa: E402

from pettingllms_cli.envs.pettingzoo_env import TextAECEnv, aec_env  # noqa: E402


@pytest.mark.parametrize(("name", "layout"), [("math_tool_v0", "multi"), ("plan_path_v0", "multi"), ("sudoku4x4_v0", "single")])
def test_api_test_passes(name: str, layout: str) -> None:
    api_test(aec_env(name, layout=layout, problems=8), num_cycles=40)


def test_reference_actions_solve_and_pay_the_team() -> None:
    env = aec_env("plan_path_v0", problems=4, render_mode="ansi")
    env.reset(seed=3)
    messages = json.loads(env.observe(env.agent_selection))
    assert messages and {"role", "content"} <= messages[0].keys()
    paid = dict.fromkeys(env.possible_agents, 0.0)
    for agent in env.agent_iter():
        observation, reward, terminated, truncated, _ = env.last()
        paid[agent] += reward
        env.step(None if terminated or truncated else env.env.reference_action(agent))
    assert env.env.success and all(r > 0 for r in paid.values()), paid
    assert "plan_agent" in env.render()


def test_wrong_layout_names_the_ones_there_are() -> None:
    with pytest.raises(ValueError, match="layouts are"):
        TextAECEnv("plan_path_v0", layout="trio")
