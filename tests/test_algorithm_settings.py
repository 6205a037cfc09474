"""The algorithms read their own settings records (algorithms/settings.py), not the spec: settings built by hand
drive an update and a distillation step, whatever the spec the team was built from says."""

from __future__ import annotations

import dataclasses

import pytest

from pettingllms_cli.algorithms.distill import distill
from pettingllms_cli.algorithms.optim import make_optimizers
from pettingllms_cli.algorithms.settings import Distillation, DistillSettings, OptimSettings, UpdateSettings
from pettingllms_cli.algorithms.update import update
from pettingllms_cli.policy.adapters import Team
from pettingllms_cli.training.update_settings import update_settings
from tests.test_update_epochs import ADVANTAGES, one_prompt_samples

pytestmark = pytest.mark.usefixtures("one_thread")
ADAPTERS = {"caller": "caller", "verifier": "verifier"}
OPTIM = OptimSettings(lr=0.05, weight_decay=0.0, schedule="constant", warmup_steps=0, steps=10)


def by_hand(**changes) -> UpdateSettings:
    plain = UpdateSettings(adapters=ADAPTERS, update_epochs=1, clip_eps=0.2, kl_coef=0.0, max_grad_norm=1.0, temperature=1.0)
    return dataclasses.replace(plain, **changes)


def test_an_update_runs_on_settings_built_by_hand(smoke_spec) -> None:
    assert smoke_spec.algorithm.kl_coef > 0 and smoke_spec.algorithm.update_epochs == 1  # what the settings override
    team = Team(smoke_spec)
    before = [p.detach().clone() for p in team.params["caller"]]
    stats = update(team, make_optimizers(team, OPTIM), one_prompt_samples(team), ADVANTAGES, by_hand())
    assert stats["caller"].loss == pytest.approx(-(1.0 * 4 - 0.5 * 2) / 6, abs=1e-6)  # one pass at the sampling policy
    assert stats["caller"].kl == 0.0 and stats["caller"].clip_frac == 0.0 and stats["caller"].lr is None
    assert not all(p.equal(q) for p, q in zip(before, team.params["caller"], strict=True))
    assert stats["verifier"].tokens == 0  # the settings name every agent, with or without samples

    again = Team(smoke_spec)
    two = update(again, make_optimizers(again, OPTIM), one_prompt_samples(again), ADVANTAGES, by_hand(update_epochs=2))
    assert two["caller"].clip_frac > 0.0  # the second pass, which the spec did not ask for, clipped
    assert update_settings(smoke_spec).kl_coef == smoke_spec.algorithm.kl_coef  # the training layer copies the spec


def test_a_distillation_runs_on_settings_built_by_hand(smoke_spec) -> None:
    team = Team(smoke_spec)
    samples = [
        dataclasses.replace(s, text="19", reward=1.0, team_success=True, messages=[{"role": "user", "content": "12+7?"}])
        for s in one_prompt_samples(team)
    ]
    d = Distillation(
        source="caller", targets=("verifier",), every=2, top_k=1, require_success=True, keep_truncated=True, weight=1.0
    )
    settings = DistillSettings(adapters=ADAPTERS, distillations=(d,), max_new_tokens=64, max_grad_norm=1.0)
    optimizers = make_optimizers(team, OPTIM)
    assert distill(team, optimizers, samples, 0, settings) == {}  # every 2 steps: not after the first
    out = distill(team, optimizers, samples, 1, settings)
    assert set(out) == {"distill_loss/verifier"} and out["distill_loss/verifier"] > 0
