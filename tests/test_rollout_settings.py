"""A rollout needs only its settings record: built by hand here, with no spec, it plays a tiny model."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, replace

import pytest
import torch

from pettingllms_cli.analysis.rollout_settings import rollout_settings
from pettingllms_cli.envs.base import Problem
from pettingllms_cli.policy.adapters import Team
from pettingllms_cli.rollout.collect import rollout
from pettingllms_cli.rollout.credit import combine
from pettingllms_cli.rollout.episodes import make_envs
from pettingllms_cli.rollout.records import Rollout, Sample
from pettingllms_cli.rollout.settings import CoordinationSettings, RewardSettings, RolloutSettings

PROBLEMS = [
    Problem("p0", "Tom has 12 apples and buys 7 more. How many apples?", 19.0, {"expression": "12+7"}),
    Problem("p1", "A box holds 6 pens. How many pens are in 3 boxes?", 18.0, {"expression": "6*3"}),
]
BY_HAND = RolloutSettings(
    kind="tree",
    group_size=3,
    max_new_tokens=5,
    temperature=1.0,
    env="math_tool_v0",
    layout="multi",
    max_turns=1,
    env_options={},
    role_owner={"tool_caller": "caller", "verifier": "verifier"},
    agent_roles={"caller": ("tool_caller",), "verifier": ("verifier",)},
    reward=RewardSettings(team_weight=1.0, local_weight=0.25, credit="none", team_signal="deferred"),
    coordination=CoordinationSettings(protocol="none", intent_tokens=24, agreement_bonus=0.0),
)


@pytest.fixture(scope="module")
def tiny_team():
    import yaml

    from pettingllms_cli.spec import parse_spec
    from tests.conftest import EXPERIMENTS

    torch.manual_seed(0)
    return Team(parse_spec(yaml.safe_load((EXPERIMENTS / "smoke.yaml").read_text())))  # the tiny random model


def test_a_tree_rollout_reads_its_settings_alone(tiny_team, one_thread):
    torch.manual_seed(1)
    played = rollout(tiny_team, BY_HAND, make_envs(BY_HAND, PROBLEMS), BY_HAND.group_size)
    groups: dict[tuple, list] = {}
    for s in played.samples:
        groups.setdefault(s.group, []).append(s)
    assert {g[0] for g in groups} == {"p0", "p1"} and all(len(g) == 3 for g in groups.values())  # K = group_size
    assert all(len({tuple(s.prompt) for s in g}) == 1 for g in groups.values())  # the K candidates share one prompt
    assert all(0 < len(s.completion) <= 5 for s in played.samples)  # max_new_tokens
    assert played.tokens == sum(len(s.completion) for s in played.samples)  # no play-outs, no intents
    for s in played.samples:  # r = 1.0 * R_team + 0.25 * r_local
        assert s.reward == pytest.approx(combine(BY_HAND.reward, s.team_reward, s.local_reward))
        assert s.agent == BY_HAND.role_owner[s.role]
    assert [e.id for e in played.episodes] == ["p0", "p1"] and all(e.turns == 1 for e in played.episodes)


def test_a_parallel_rollout_plays_k_episodes_per_problem(tiny_team, one_thread):
    settings = replace(BY_HAND, kind="parallel", max_new_tokens=3)
    torch.manual_seed(1)
    played = rollout(tiny_team, settings, make_envs(settings, PROBLEMS), 2)
    assert [e.id for e in played.episodes] == ["p0", "p0", "p1", "p1"]
    assert all(len(s.completion) <= 3 for s in played.samples)
    assert {s.group for s in played.samples} <= {(p, a) for p in ("p0", "p1") for a in ("caller", "verifier")}


def test_the_settings_are_frozen_and_built_from_a_spec(smoke_spec):
    settings = rollout_settings(smoke_spec)
    assert (settings.kind, settings.group_size, settings.max_new_tokens, settings.max_turns) == ("tree", 4, 8, 2)
    assert settings.role_owner == {"tool_caller": "caller", "verifier": "verifier"}
    assert settings.reward.local_weight == 0.5 and settings.coordination.protocol == "none"
    with pytest.raises(FrozenInstanceError):
        settings.temperature = 0.5  # type: ignore[misc]


def test_a_sample_is_frozen_and_built_by_keyword():
    fields = {"agent": "caller", "role": "tool_caller", "turn": 0, "problem_id": "p0", "group": ("p0",), "prompt": [1]}
    fields |= {"completion": torch.tensor([2]), "text": "x", "reward": 1.0, "team_reward": 1.0, "local_reward": 0.0}
    sample = Sample(**fields)
    with pytest.raises(TypeError):
        Sample(*fields.values())  # positional: which float is which reward would be the reader's guess
    with pytest.raises(FrozenInstanceError):
        sample.reward = 0.0  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        Rollout().tokens = 1  # type: ignore[misc]
