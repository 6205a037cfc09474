"""AT-GRPO math against numbers computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from pettingllms_cli.algorithms.grpo import group_advantages, k3_kl, ppo_clip_loss, zero_std_groups


def test_advantages_by_hand():
    # group a: rewards 1, 0, 2 -> mean 1, unbiased std 1 -> (0, -1, 1)
    # group b: rewards 4, 6 -> mean 5, std sqrt(2) -> (-1/sqrt2, 1/sqrt2)
    rewards = torch.tensor([1.0, 4.0, 0.0, 6.0, 2.0])
    groups = [("p1", "caller", 0), ("p2", "caller", 0), ("p1", "caller", 0), ("p2", "caller", 0), ("p1", "caller", 0)]
    adv = group_advantages(rewards, groups, eps=0.0)
    expected = [0.0, -1 / math.sqrt(2), -1.0, 1 / math.sqrt(2), 1.0]
    assert adv.tolist() == pytest.approx(expected, abs=1e-6)


def test_two_problems_never_share_a_group():
    # Same role and turn, different problems: pooled they would give nonzero advantages.
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.0])
    groups = [("p1", "r", 0), ("p1", "r", 0), ("p2", "r", 0), ("p2", "r", 0)]
    assert group_advantages(rewards, groups).tolist() == [0.0, 0.0, 0.0, 0.0]
    assert zero_std_groups(rewards, groups) == {("p1", "r", 0), ("p2", "r", 0)}


def test_equal_rewards_give_zero_advantage_without_scaling():
    adv = group_advantages(torch.tensor([0.3] * 8), ["g"] * 8, scale="none")
    assert torch.count_nonzero(adv) == 0


def test_ppo_clip_by_hand():
    # ratio = exp(logp - old): token 1 ratio 1.5 with A=+1 -> clipped to 1.2 -> loss -1.2
    # token 2 ratio 0.5 with A=+1 -> min(0.5, 0.8) = 0.5 -> loss -0.5
    # token 3 ratio 0.5 with A=-2 -> min(-1.0, -1.6) = -1.6 -> loss 1.6 (clipped)
    # token 4 ratio 1.5 with A=-2 -> min(-3.0, -2.4) = -3.0 -> loss 3.0
    old = torch.zeros(2, 2)
    logp = torch.log(torch.tensor([[1.5, 0.5], [0.5, 1.5]]))
    loss, clipped = ppo_clip_loss(logp, old, torch.tensor([1.0, -2.0]), clip_eps=0.2)
    assert loss.flatten().tolist() == pytest.approx([-1.2, -0.5, 1.6, 3.0], abs=1e-6)
    assert clipped.tolist() == [[True, False], [True, False]]


def test_ppo_gradient_at_ratio_one_is_policy_gradient():
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    loss, _ = ppo_clip_loss(logp, logp.detach(), torch.tensor([0.5]), clip_eps=0.2)
    loss.sum().backward()
    assert logp.grad.tolist() == [[-0.5, -0.5]]


def test_k3_by_hand():
    # d = ref - logp = -0.5 -> exp(-0.5) + 0.5 - 1
    kl = k3_kl(torch.tensor([[-1.0]]), torch.tensor([[-1.5]]))
    assert kl.item() == pytest.approx(math.exp(-0.5) - 0.5, abs=1e-7)
    assert k3_kl(torch.tensor([[-2.0]]), torch.tensor([[-2.0]])).item() == 0.0


def test_scale_none_keeps_the_reward_difference():
    """Dr. GRPO: at K=2 a 0.1 format difference is +-0.05, not the +-0.707 std scaling makes of any two rewards."""
    rewards, groups = torch.tensor([0.05, -0.05]), ["g", "g"]
    assert group_advantages(rewards, groups, scale="none").tolist() == pytest.approx([0.05, -0.05])
    assert group_advantages(rewards, groups, scale="group", eps=0.0).tolist() == pytest.approx([0.7071, -0.7071], abs=1e-4)


def test_scale_batch_divides_every_group_by_one_std():
    # group a: 1, 0 (centred 0.5, -0.5); group b: 0.2, 0 (centred 0.1, -0.1). All four: mean 0.3,
    # squares 1 + 0.04 = 1.04, variance (1.04 - 4 * 0.09) / 3 = 0.22667, std 0.47610.
    rewards, groups = torch.tensor([1.0, 0.0, 0.2, 0.0]), ["a", "a", "b", "b"]
    std = math.sqrt((1.04 - 4 * 0.09) / 3)
    adv = group_advantages(rewards, groups, scale="batch", eps=0.0)
    assert adv.tolist() == pytest.approx([0.5 / std, -0.5 / std, 0.1 / std, -0.1 / std], abs=1e-5)
    assert adv[0] / adv[2] == pytest.approx(5.0)  # the groups keep their sizes relative to each other (group: both 0.707)


def test_batch_std_from_sums_matches_torch():
    from pettingllms_cli.algorithms.grpo import batch_std

    rewards = torch.tensor([1.0, 0.0, 0.2, 0.0])
    assert batch_std(4, float(rewards.sum()), float((rewards**2).sum())) == pytest.approx(float(rewards.std()), abs=1e-6)


def test_scale_rewards_accepts_three_values_and_old_booleans(smoke_tree):
    from pettingllms_cli.errors import UserError
    from pettingllms_cli.spec import parse_spec

    def scale(value):
        return parse_spec(
            {**smoke_tree, "algorithm": {**smoke_tree["algorithm"], "scale_rewards": value}}
        ).algorithm.scale_rewards

    assert [scale(v) for v in ("group", "batch", "none", True, False)] == ["group", "batch", "none", "group", "none"]
    assert parse_spec(smoke_tree).algorithm.scale_rewards == "group"  # the default is unchanged
    with pytest.raises(UserError, match="group.*batch.*none"):
        scale("std")


@pytest.mark.parametrize("algorithm", [{"update_epochs": 2}, {"tis_cap": 2.0}])
def test_lora_dropout_is_refused_where_the_ratio_needs_the_sampling_policy(smoke_tree, algorithm):
    """Sampling runs without dropout, the update with it: a later pass's ratio and TIS would compare two policies."""
    from pettingllms_cli.errors import UserError
    from pettingllms_cli.spec import parse_spec

    tree = {**smoke_tree, "algorithm": {**smoke_tree["algorithm"], **algorithm}, "sampler": "vllm"}
    tree["agents"] = {name: {**agent, "lora": {"dropout": 0.1}} for name, agent in smoke_tree["agents"].items()}
    with pytest.raises(UserError, match="lora.dropout"):
        parse_spec(tree)
    tree["agents"] = {name: {**agent, "lora": {"dropout": 0.0}} for name, agent in smoke_tree["agents"].items()}
    parse_spec(tree)  # without dropout both are fine
    one = {**smoke_tree, "agents": {n: {**a, "lora": {"dropout": 0.1}} for n, a in smoke_tree["agents"].items()}}
    parse_spec(one)  # one on-policy pass: the ratio is 1 whatever the mode
