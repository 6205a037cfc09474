"""Metrics named for what they measure (docs/metrics.md): on-policy vs best-of-K success on scripted trees.

A scripted team stands in for the models: candidate j of every K-sample is script[role][j], and a
one-sample draw (the on-policy path off the tree) is script[role][0]. So the tree's best branch can
solve while the policy's own sample does not, and the metrics must tell them apart.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import replace

import torch

from pettingllms_cli.algorithms.update import AgentStats
from pettingllms_cli.envs.base import Problem
from pettingllms_cli.envs.math_tool import MathToolEnv
from pettingllms_cli.rollout.records import Rollout
from pettingllms_cli.spec import parse_spec
from pettingllms_cli.training.metrics import compute_metrics, step_metrics
from pettingllms_cli.training.update_settings import optim_settings, update_settings
from tests.samples import caller_sample
from tests.scripted import on_policy_episodes, tree_rollout

PROBLEM = Problem("p0", "Tom has 12 apples and buys 7 more. How many apples?", 19.0, {"expression": "12+7"})
WRONG, RIGHT, BROKEN = '1+1"}}</tool_call>', '12+7"}}</tool_call>', "oops"


class ScriptedTeam:
    """Stands in for Team: prompts are hashes of the messages; candidate j is script[role][j]; counts generates."""

    def __init__(self, script: dict[str, list[str]], role_of: dict[str, str]):
        self.script, self.role_of = script, role_of
        self.generated: list[tuple[str, int]] = []  # (role, k) of every sample_mixed row

    def encode(self, agent, messages):
        digest = hashlib.sha256(repr(messages).encode()).digest()
        return list(digest[:8])

    def sample_mixed(self, agents, prompts, k, max_new_tokens, temperature, greedy=False, seeds=None):
        self.generated += [(self.role_of[a], k) for a in agents]
        return [[torch.tensor([j]) for j in range(k)] for _ in prompts]

    def decode(self, agent, ids):
        return self.script[self.role_of[agent]][int(ids[0])]


def spec(smoke_tree: dict, layout: str):
    tree = copy.deepcopy(smoke_tree)
    tree["env"] |= {"layout": layout, "max_turns": 1, "options": {}}
    tree["algorithm"]["group_size"] = 2
    if layout == "single":
        tree["agents"] = {"solver": {"model": "tiny", "roles": ["solver"]}}
    return parse_spec(tree)


def metrics_of(s, rollout) -> dict:
    return step_metrics(s, 1, rollout, {a: AgentStats() for a in s.agents}, 1.0)


def test_best_branch_solves_where_the_policys_own_sample_does_not(smoke_tree):
    s = spec(smoke_tree, "single")
    team = ScriptedTeam({"solver": [WRONG, RIGHT]}, {"solver": "solver"})
    envs = [MathToolEnv(PROBLEM, "single", 1, {})]
    rollout = tree_rollout(team, s, envs, k=2)
    on_policy, tokens = on_policy_episodes(team, s, envs, rollout)
    rollout = replace(rollout, on_policy=on_policy, on_policy_tokens=tokens)
    m = metrics_of(s, rollout)
    assert m["best_branch_success_rate"] == 1.0  # the tree kept the right candidate
    assert m["team_success_rate"] == 0.0  # the policy's own draw (candidate 0) was wrong
    assert m["mean_attempts_to_success"] is None and m["solved_episodes"] == 0
    # One role, one turn: the on-policy episode reused the tree's draw, nothing more was generated.
    assert team.generated == [("solver", 2)] and rollout.on_policy_tokens == 0


def test_the_on_policy_path_samples_its_own_actions_once_it_leaves_the_tree(smoke_tree):
    s = spec(smoke_tree, "multi")
    script = {"tool_caller": [BROKEN, RIGHT], "verifier": ["19", "19"]}
    team = ScriptedTeam(script, {"caller": "tool_caller", "verifier": "verifier"})
    envs = [MathToolEnv(PROBLEM, "multi", 1, {})]
    rollout = tree_rollout(team, s, envs, k=2)
    before = len(team.generated)
    on_policy, tokens = on_policy_episodes(team, s, envs, rollout)
    rollout = replace(rollout, on_policy=on_policy, on_policy_tokens=tokens)
    # The tree went on from the call that ran; the on-policy episode from the broken one, so its verifier
    # saw another calculator result and drew its own answer (one sample, k=1).
    assert team.generated[before:] == [("verifier", 1)] and rollout.on_policy_tokens == 1
    episode = rollout.on_policy[0]
    assert [t["text"] for t in episode.transcript][0].endswith(BROKEN)
    m = metrics_of(s, rollout)
    assert (m["best_branch_success_rate"], m["team_success_rate"]) == (1.0, 1.0)  # "19" is right either way
    assert not envs[0].transcript  # the envs handed in stay unplayed


def test_parallel_rollouts_have_no_best_branch_key(smoke_tree):
    tree = copy.deepcopy(smoke_tree)
    tree["algorithm"]["rollout"] = "parallel"
    s = parse_spec(tree)
    from pettingllms_cli.rollout.records import Rollout

    assert "best_branch_success_rate" not in metrics_of(s, Rollout())


def test_eval_every_must_fit_the_run(smoke_tree):
    import pytest

    from pettingllms_cli.errors import UserError

    for bad in (0, 3):  # smoke trains 2 steps
        tree = copy.deepcopy(smoke_tree)
        tree["train"]["eval_every"] = bad
        with pytest.raises(UserError, match=r"train: eval_every: .* between 1 and train.steps \(2\).*leave it out"):
            parse_spec(tree, "smoke.yaml")
    tree = copy.deepcopy(smoke_tree)
    tree["train"]["eval_every"] = 2
    assert parse_spec(tree).train.eval_every == 2


def test_a_step_whose_only_group_tied_trains_nothing_and_says_so(smoke_tree):
    """Equal rewards and kl_coef 0: no gradient, the adapter keeps its weights, and the step is not counted as training.

    Before, `trained_tokens` counted the tied group's tokens and `optimizer_steps` the adapter as a step done.
    """
    from pettingllms_cli.algorithms.grpo import group_advantages
    from pettingllms_cli.algorithms.optim import make_optimizers
    from pettingllms_cli.algorithms.update import update
    from pettingllms_cli.policy.adapters import Team
    from pettingllms_cli.rollout.records import Rollout
    from pettingllms_cli.training.metrics import compute_metrics

    tree = copy.deepcopy(smoke_tree)
    tree["algorithm"] |= {"kl_coef": 0.0, "lr": 0.05, "weight_decay": 0.1}  # weight decay alone would move the weights
    s = parse_spec(tree)
    team = Team(s)
    prompt = team.encode("caller", [{"role": "user", "content": "What is 12+7?"}])
    group = ("p0", "tool_caller", 0)
    samples = [
        caller_sample(group=group, prompt=prompt, completion=torch.tensor(ids), reward=0.5, team_reward=0.5)
        for ids in ([11, 12, 13], [21, 22])
    ]
    tied = group_advantages(torch.tensor([0.5, 0.5]), [group, group]).tolist()  # the group tied: 0 and 0
    before = {a: [p.detach().clone() for p in params] for a, params in team.params.items()}
    stats = update(team, make_optimizers(team, optim_settings(team.spec)), samples, tied, update_settings(team.spec))
    spent = compute_metrics(s, Rollout(samples=samples), stats)
    assert spent["trained_tokens"] == 0 and spent["effective_optimizer_steps"] == 0
    assert spent["optimizer_steps"] == 1  # the caller's adapter had samples: it went through the step, moving nothing
    for adapter, params in team.params.items():
        assert all(torch.equal(a, b) for a, b in zip(before[adapter], params, strict=True)), adapter
    stats = update(
        team, make_optimizers(team, optim_settings(team.spec)), samples, [1.0, -1.0], update_settings(team.spec)
    )  # the same step with a signal: 5 tokens, moved
    spent = compute_metrics(s, Rollout(samples=samples), stats)
    assert spent["trained_tokens"] == 5 and spent["effective_optimizer_steps"] == 1
    assert not all(torch.equal(a, b) for a, b in zip(before["caller"], team.params["caller"], strict=True))


def test_actions_total_counts_play_outs_and_intents(smoke_tree):
    s = spec(smoke_tree, "single")
    rollout = Rollout(samples=[], playout_actions=6, intent_actions=2)
    spent = compute_metrics(s, rollout, {"solver": AgentStats()})
    assert spent["actions_total"] == 8 and spent["playout_actions"] == 6 and spent["intent_actions"] == 2
