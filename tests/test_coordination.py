"""The coordination protocol (issue 4, item 6): an intent round before each turn's actions.

Checked: every role declares before any role acts, and sees the intents declared before it;
actions see the whole turn's intents; each action is checked against its intent (the env's
judgement, on the generated text; the rollout's `Play` keeps the checks) and `intent_agreement`
is logged; intents are trained under `parallel` (with their episode's reward) and not under
`tree`; `agreement_bonus` rewards an action that does what it said; a run logs the metric.
"""

from __future__ import annotations

import copy
import json

import pytest
import torch

from pettingllms_cli.envs.base import Problem
from pettingllms_cli.envs.math_tool import MathToolEnv
from pettingllms_cli.errors import UserError
from pettingllms_cli.rollout import coordination
from pettingllms_cli.rollout.coordination import Play
from pettingllms_cli.rollout.episodes import record
from pettingllms_cli.spec import parse_spec
from tests.conftest import EXPERIMENTS, FAST, run_cli
from tests.scripted import parallel_rollout, tree_rollout

PROBLEM = Problem("p0", "Tom has 12 apples and buys 7 more. How many apples?", 19.0, {"expression": "12+7"})
INTENTS = {"tool_caller": "compute 12+7</intent>", "verifier": "answer 19</intent>"}
ACTIONS = {"tool_caller": '12+7"}}</tool_call>', "verifier": "19"}


class ScriptedTeam:
    """Stands in for Team: intents and actions come from scripts; every prompt it is shown is kept, in order."""

    def __init__(self, intents: dict[str, str], actions: dict[str, str]):
        self.intents, self.actions = intents, actions
        self.seen: list[tuple[str, str, list[dict]]] = []  # (kind, role, messages)
        self._next: list[str] = []

    def encode(self, agent, messages):
        kind = "intent" if messages[-1]["content"] == coordination.OPEN else "action"
        role = "verifier" if messages[0]["content"].startswith("Check") else "tool_caller"
        self.seen.append((kind, role, messages))
        self._next.append((self.intents if kind == "intent" else self.actions)[role])
        return [1, 2, 3]

    def sample_mixed(self, agents, prompts, k, max_new_tokens, temperature, greedy=False, seeds=None):
        texts, self._next = self._next[-len(prompts) :], self._next[: -len(prompts)]
        self.pending = texts
        return [[torch.tensor([i]) for _ in range(k)] for i in range(len(prompts))]

    def decode(self, agent, ids):
        return self.pending[int(ids[0])]


def spec_with(smoke_tree: dict, **coordination_options):
    tree = copy.deepcopy(smoke_tree)
    tree["coordination"] = {"protocol": "intent", **coordination_options}
    tree["env"]["max_turns"] = 1
    tree["env"]["options"] = {}
    tree["algorithm"]["group_size"] = 2
    return parse_spec(tree)


def env(spec) -> MathToolEnv:
    return MathToolEnv(PROBLEM, "multi", spec.env.max_turns, spec.env.options)


def test_extract_takes_the_tag_and_one_line():
    assert coordination.extract("<intent> add\n12 and 7 </intent>ignored") == "add 12 and 7"
    assert coordination.extract("<intent>" + "x" * 500) == "x" * coordination.MAX_CHARS  # unclosed: to the end, cut
    assert coordination.extract("") == ""


def test_env_shows_the_turns_intents_and_checks_actions_against_them():
    e = Play(MathToolEnv(PROBLEM, "multi", 2, {}))
    assert e.view("verifier") == e.env.observe("verifier")  # no intents: the plain observation
    e.declare("tool_caller", "compute 12+7")
    e.declare("verifier", "answer 19")
    shown = e.view("verifier")[-2]["content"]
    assert "tool_caller: compute 12+7" in shown and "verifier: answer 19" in shown
    assert e.intent_agreement is None
    res = e.step("tool_caller", '<tool_call>{"name": "calculator", "arguments": {"expression": "12+7"}}</tool_call>')
    assert res.info["intent_agrees"] is True
    res = e.step("verifier", "Answer: 20")  # said 19, answered 20
    assert res.info["intent_agrees"] is False and res.info["intent"] == "answer 19"
    assert e.intent_agreement == 0.5
    assert e.intents == {}  # the turn is over: the next one opens with a new round
    assert record(e).state["intent_agreement"] == 0.5


def test_an_intent_that_only_repeats_the_prefill_does_not_agree():
    e = Play(MathToolEnv(PROBLEM, "multi", 2, {}))
    e.step("tool_caller", '<tool_call>{"name": "calculator", "arguments": {"expression": "12+7"}}</tool_call>')
    prefill = e.env.prefill("verifier")
    assert prefill == "Answer: "
    e.declare("verifier", "answer")  # names only what the env prefills
    res = e.step("verifier", prefill + "19")
    assert res.info["intent_agrees"] is False  # the generated "19" does not do what "answer" says
    e.declare("tool_caller", "calculator")  # the caller's prefill names the calculator
    res = e.step("tool_caller", e.env.prefill("tool_caller") + '12+7"}}</tool_call>')
    assert res.info["intent_agrees"] is False


def test_every_role_declares_before_anyone_acts_and_sees_earlier_intents(smoke_tree):
    spec = spec_with(smoke_tree)
    team = ScriptedTeam(INTENTS, ACTIONS)
    rollout = tree_rollout(team, spec, [env(spec)], k=2)
    kinds = [(kind, role) for kind, role, _ in team.seen]
    assert kinds == [("intent", "tool_caller"), ("intent", "verifier"), ("action", "tool_caller"), ("action", "verifier")]
    verifier_intent_prompt = team.seen[1][2][-2]["content"]
    assert "tool_caller: compute 12+7" in verifier_intent_prompt and coordination.ASK in verifier_intent_prompt
    caller_action_prompt = team.seen[2][2]
    assert "verifier: answer 19" in caller_action_prompt[-2]["content"]  # acting, the caller sees the verifier's intent
    assert caller_action_prompt[-1]["role"] == "assistant"  # the action prefill is kept
    episode = rollout.episodes[0]
    assert episode.success and episode.intent_agreement == 1.0
    assert rollout.intents == []  # tree: intents condition the groups but are not trained


def test_a_play_out_sees_the_turns_intents(smoke_tree):
    spec = spec_with(smoke_tree)
    spec = spec.model_copy(update={"reward": spec.reward.model_copy(update={"team_signal": "turn_end"})})
    team = ScriptedTeam(INTENTS, ACTIONS)
    tree_rollout(team, spec, [env(spec)], k=2)
    kinds = [(kind, role) for kind, role, _ in team.seen]
    acts = [("action", "tool_caller"), *[("action", "verifier")] * 3]  # the caller's 2 candidates' play-outs, the verifier
    assert kinds == [("intent", "tool_caller"), ("intent", "verifier"), *acts]
    assert "tool_caller: compute 12+7" in team.seen[3][2][-2]["content"]


def test_parallel_trains_intents_with_their_episodes_reward(smoke_tree):
    spec = spec_with(smoke_tree)
    rollout = parallel_rollout(ScriptedTeam(INTENTS, ACTIONS), spec, [env(spec)], k=2)
    assert len(rollout.intents) == 2 * 2  # k episodes x 2 roles x 1 turn
    for intent in rollout.intents:
        same = [s for s in rollout.samples if s.agent == intent.agent and s.group == intent.group]
        assert intent.reward == same[0].reward > 0 and intent.text.startswith(coordination.OPEN)


def test_agreement_bonus_rewards_an_action_that_does_what_it_said(smoke_tree):
    spec = spec_with(smoke_tree, agreement_bonus=0.5)
    honest = tree_rollout(ScriptedTeam(INTENTS, ACTIONS), spec, [env(spec)], k=2)
    liar = tree_rollout(ScriptedTeam({**INTENTS, "verifier": "answer 42</intent>"}, ACTIONS), spec, [env(spec)], k=2)
    said, lied = ([s for s in r.samples if s.role == "verifier"][0] for r in (honest, liar))
    assert said.local_reward - lied.local_reward == pytest.approx(0.5)
    assert said.team_reward == lied.team_reward == 1.0  # the outcome is the same: only the bonus differs


def test_intent_needs_two_roles(smoke_tree):
    tree = copy.deepcopy(smoke_tree)
    tree["coordination"] = {"protocol": "intent"}
    tree["env"]["layout"] = "single"
    tree["agents"] = {"solo": {"model": "tiny", "roles": ["solver"]}}
    with pytest.raises(UserError, match="coordination.protocol"):
        parse_spec(tree)


@pytest.mark.usefixtures("one_thread")
def test_a_run_with_the_intent_round_logs_agreement(tmp_path, monkeypatch):
    out = tmp_path / "run"
    args = ["train", str(EXPERIMENTS / "smoke.yaml"), "--out", str(out), "--set", "coordination.protocol=intent"]
    args += [a for o in FAST + ["train.steps=1", "algorithm.rollout=parallel"] for a in ("--set", o)]
    assert run_cli(args, monkeypatch) == 0
    row = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert 0.0 <= row["intent_agreement"] <= 1.0
    after = json.loads((out / "eval_after.json").read_text())
    assert 0.0 <= after["intent_agreement"] <= 1.0
    assert any("intent" in entry for entry in after["transcripts"][0]["transcript"])


def test_a_bad_protocol_is_one_line(monkeypatch, capsys):
    args = ["validate", str(EXPERIMENTS / "smoke.yaml"), "--set", "coordination.protocol=telepathy"]
    assert run_cli(args, monkeypatch) == 2
    assert "coordination.protocol" in capsys.readouterr().err
