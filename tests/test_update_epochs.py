"""`algorithm.update_epochs`: later passes take the PPO ratio against the sampling policy, so the clip binds;
one pass is the plain on-policy step it always was."""

from __future__ import annotations

import pytest
import torch

from pettingllms_cli.algorithms.optim import make_optimizers
from pettingllms_cli.algorithms.update import update
from pettingllms_cli.policy.adapters import Team
from pettingllms_cli.rollout.records import Sample
from pettingllms_cli.spec import parse_spec
from pettingllms_cli.training.update_settings import optim_settings, update_settings
from tests.samples import caller_sample

pytestmark = pytest.mark.usefixtures("one_thread")


def _team(smoke_tree: dict, epochs: int) -> Team:
    algorithm = {**smoke_tree["algorithm"], "kl_coef": 0.0, "lr": 0.05, "clip_eps": 0.2, "update_epochs": epochs}
    return Team(parse_spec({**smoke_tree, "algorithm": algorithm}))


ADVANTAGES = [1.0, -0.5]  # of `one_prompt_samples`, in order


def one_prompt_samples(team: Team) -> list[Sample]:
    """Two completions of one prompt (4 and 2 tokens), to train with advantages +1 and -0.5 (`ADVANTAGES`)."""
    prompt = team.encode("caller", [{"role": "user", "content": "What is 12+7?"}])
    group = ("p0", "tool_caller", 0)
    completions = (torch.tensor([11, 12, 13, 14]), torch.tensor([21, 22]))
    return [caller_sample(group=group, prompt=prompt, completion=ids) for ids in completions]


def test_one_pass_is_the_on_policy_step(smoke_tree) -> None:
    """At the sampling policy every ratio is 1, so the token-mean loss is -sum(A_k T_k) / sum(T_k), as before update_epochs."""
    team = _team(smoke_tree, 1)
    stats = update(
        team, make_optimizers(team, optim_settings(team.spec)), one_prompt_samples(team), ADVANTAGES, update_settings(team.spec)
    )
    assert stats["caller"].loss == pytest.approx(-(1.0 * 4 - 0.5 * 2) / 6, abs=1e-6)
    assert stats["caller"].clip_frac == 0.0


def test_a_second_pass_is_clipped_against_the_sampling_policy(smoke_tree) -> None:
    team = _team(smoke_tree, 2)
    before = [p.detach().clone() for p in team.params["caller"]]
    stats = update(
        team, make_optimizers(team, optim_settings(team.spec)), one_prompt_samples(team), ADVANTAGES, update_settings(team.spec)
    )
    assert stats["caller"].clip_frac > 0.0  # logged as clip_frac/caller
    assert stats["caller"].tokens == 6  # the tokens trained on, once however many passes
    assert not stats["caller"].skipped
    assert not all(torch.equal(a, b) for a, b in zip(before, team.params["caller"], strict=True))
