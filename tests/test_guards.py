"""Guards (issue 7): non-finite losses and gradients skip and count; disk problems are clear messages."""

from __future__ import annotations

import errno
import json
import math
from pathlib import Path
from unittest import mock

import pytest
import torch
from rich.console import Console
from safetensors.torch import load_file

import pettingllms_cli.algorithms.update as update_mod
from pettingllms_cli.algorithms.optim import make_optimizers
from pettingllms_cli.algorithms.update import update
from pettingllms_cli.errors import UserError
from pettingllms_cli.policy.adapters import Team
from pettingllms_cli.rollout.records import Sample
from pettingllms_cli.spec import load_spec
from pettingllms_cli.training.loop import train
from pettingllms_cli.training.update_settings import optim_settings, update_settings
from tests.conftest import FAST

ROOT = Path(__file__).resolve().parents[1]


pytestmark = pytest.mark.usefixtures("one_thread")


def fast_spec(*extra: str):
    return load_spec(ROOT / "experiments" / "smoke.yaml", [*FAST, *extra])


def run(spec, run_dir: Path) -> Path:
    with mock.patch("pettingllms_cli.training.loop.write_report"):
        return train(spec, run_dir, console=Console(quiet=True))


ADVANTAGES = [1.0, -1.0, 1.0, -1.0]  # of `samples_for`, in order


def samples_for(team: Team) -> list[Sample]:
    """Two completions per agent, to train with opposite advantages (`ADVANTAGES`): a real gradient for every adapter."""
    out = []
    for agent, role in (("caller", "tool_caller"), ("verifier", "verifier")):
        prompt = team.encode(agent, [{"role": "user", "content": "Tom has 12 apples and buys 7 more."}])
        for k, adv in enumerate((1.0, -1.0)):
            ids = torch.tensor([5 + k, 6, 7])
            out.append(
                Sample(
                    agent=agent,
                    role=role,
                    turn=0,
                    problem_id="p0",
                    group=("p0", role, 0),
                    prompt=prompt,
                    completion=ids,
                    text="",
                    reward=adv,
                    team_reward=0.0,
                    local_reward=adv,
                )
            )
    return out


def lora_params(team: Team, agent: str) -> list[torch.Tensor]:
    return [p.detach().clone() for p in team.params[team.spec.adapter_of(agent)]]


def test_nan_gradient_skips_only_that_agents_update(smoke_spec) -> None:
    team = Team(smoke_spec)
    for p in team.params["caller"]:
        p.register_hook(lambda g: torch.full_like(g, math.nan))
    caller_before, verifier_before = lora_params(team, "caller"), lora_params(team, "verifier")

    optimizers = make_optimizers(team, optim_settings(team.spec))
    stats = update(team, optimizers, samples_for(team), ADVANTAGES, update_settings(team.spec))

    assert stats["caller"].skipped and not stats["verifier"].skipped
    assert math.isnan(stats["caller"].grad_norm) and math.isfinite(stats["verifier"].grad_norm)
    assert all(torch.equal(a, b) for a, b in zip(caller_before, lora_params(team, "caller"), strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(verifier_before, lora_params(team, "verifier"), strict=True))
    assert optimizers["caller"].state == {}, "a skipped update must not touch the optimizer state"
    assert all(p.grad is None for p in team.params["caller"])


def nan_loss_for(agent: str):
    real = update_mod.batch_loss

    def patched(team, settings, who, batch, advantages, old_logp=None, sampler=None, prefix=None):
        loss, logp, sums = real(team, settings, who, batch, advantages, old_logp, sampler, prefix)
        return (loss * math.nan if who == agent else loss), logp, sums

    return patched


def test_nan_loss_skips_counts_and_stops_after_max_in_a_row(tmp_path: Path) -> None:
    spec = fast_spec("train.steps=4", "train.max_skipped_in_a_row=2")
    with mock.patch.object(update_mod, "batch_loss", nan_loss_for("caller")), pytest.raises(UserError) as err:
        run(spec, tmp_path / "run")
    assert "caller" in str(err.value) and "2 steps in a row" in str(err.value) and "step_1" in str(err.value)

    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2], "the run stops at the step that reached the limit"
    assert [r["skipped_updates/caller"] for r in rows] == [1, 1]
    assert [r["skipped_updates/verifier"] for r in rows] == [0, 0]
    assert rows[0]["grad_norm/caller"] is None, "a non-finite value is logged as null"
    assert all(r["grad_norm/verifier"] is not None for r in rows)

    step_1 = tmp_path / "run" / "checkpoints" / "step_1"
    state = torch.load(step_1 / "trainer_state.pt", weights_only=True)
    assert state["optimizers"]["caller"]["state"] == {} and state["optimizers"]["verifier"]["state"] != {}
    assert state["skipped_in_a_row"] == {"caller": 1, "verifier": 0}
    caller_b = [v for k, v in load_file(step_1 / "caller" / "adapter_model.safetensors").items() if "lora_B" in k]
    assert caller_b and all(torch.count_nonzero(v) == 0 for v in caller_b), "the caller's adapter moved despite the skip"
    assert not (tmp_path / "run" / "checkpoints" / "step_2").exists()


def test_unwritable_output_folder_fails_before_loading_weights(tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    with mock.patch("pettingllms_cli.training.loop.Team", side_effect=AssertionError("weights loaded")):
        with pytest.raises(UserError, match="cannot write the run directory"):
            run(fast_spec(), blocker / "run")


def test_full_disk_at_the_probe_fails_before_loading_weights(tmp_path: Path) -> None:
    def no_space(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with (
        mock.patch("pettingllms_cli.training.loop.Team", side_effect=AssertionError("weights loaded")),
        mock.patch("os.fsync", no_space),
    ):
        with pytest.raises(UserError, match="No space left on device"):
            run(fast_spec(), tmp_path / "run")
    assert not [p for p in (tmp_path / "run").iterdir() if p.name.startswith(".write-probe")]


def test_too_little_disk_space_for_the_checkpoints_fails_before_training(tmp_path: Path) -> None:
    with mock.patch("pettingllms_cli.training.checkpoint.shutil.disk_usage", return_value=mock.Mock(free=4096)):
        with pytest.raises(UserError, match=r"MiB free.*checkpoint"):
            run(fast_spec(), tmp_path / "run")
    assert not (tmp_path / "run" / "metrics.jsonl").exists() and not (tmp_path / "run" / "eval_before.json").exists()


def test_failing_checkpoint_keeps_the_previous_one(tmp_path: Path) -> None:
    real_save = torch.save

    def disk_full_at_step_2(obj, path, *args, **kwargs):
        if "step_2" in str(path):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(obj, path, *args, **kwargs)

    with mock.patch("pettingllms_cli.training.checkpoint.torch.save", disk_full_at_step_2), pytest.raises(UserError) as err:
        run(fast_spec("train.steps=3"), tmp_path / "run")
    message = str(err.value)
    assert "step_2" in message and "No space left on device" in message and "step_1 is intact" in message
    checkpoints = tmp_path / "run" / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step_1"], "the failed write left files behind"
    assert (checkpoints / "step_1" / "trainer_state.pt").is_file()
