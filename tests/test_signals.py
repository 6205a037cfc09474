"""Graceful stop (issue 7): SIGINT/SIGTERM finish the step, write a checkpoint, exit 0 and say how to resume."""

from __future__ import annotations

import io
import json
import os
import shlex
import signal
import time
from pathlib import Path
from unittest import mock

import pytest
from rich.console import Console

import pettingllms_cli.training.loop as train_mod
from pettingllms_cli.spec import load_spec
from pettingllms_cli.training.graceful import GracefulStop
from tests.conftest import FAST
from tests.test_exit_codes import sets, start

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "experiments" / "smoke.yaml"
# Many steps and no scheduled checkpoint: the only checkpoint a stopped run has is the one the signal wrote.
LONG = ["train.steps=50", "train.checkpoint_every=100"]


pytestmark = pytest.mark.usefixtures("one_thread")


def steps_logged(run_dir: Path) -> list[int]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line)["step"] for line in path.read_text().splitlines()] if path.is_file() else []


def checkpoints(run_dir: Path) -> list[str]:
    return sorted(p.name for p in (run_dir / "checkpoints").iterdir())


def test_second_signal_aborts_and_handlers_are_restored() -> None:
    before = signal.getsignal(signal.SIGINT)
    with GracefulStop() as stop:
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.requested == "SIGINT"
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGINT) is before


def test_sigint_in_process_stops_after_the_step_with_a_checkpoint(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    real_update = train_mod.update

    def update_then_interrupt(team, optimizers, samples, *rest):
        stats = real_update(team, optimizers, samples, *rest)
        os.kill(os.getpid(), signal.SIGINT)  # arrives mid-step: the step still finishes
        return stats

    out = io.StringIO()
    spec = load_spec(SMOKE, [*FAST, *LONG])
    with mock.patch.object(train_mod, "update", update_then_interrupt), mock.patch.object(train_mod, "write_report"):
        train_mod.train(spec, run_dir, console=Console(file=out, width=80), resume_command="pettingllms train X --resume")
    assert steps_logged(run_dir) == [1]
    assert checkpoints(run_dir) == ["step_1"]
    assert (run_dir / "checkpoints" / "step_1" / "trainer_state.pt").is_file()
    assert not (run_dir / "eval_after.json").exists()
    line = next(line for line in out.getvalue().splitlines() if "resume with:" in line)
    assert line.startswith("SIGINT: stopped after step 1/50") and line.endswith("resume with: pettingllms train X --resume")

    with mock.patch.object(train_mod, "write_report"):
        train_mod.train(load_spec(SMOKE, [*FAST, *LONG, "train.steps=2"]), run_dir, resume=True, console=Console(quiet=True))
    assert steps_logged(run_dir) == [1, 2] and (run_dir / "eval_after.json").is_file()


def test_sigterm_to_the_cli_writes_a_checkpoint_and_exits_0(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    args = ["train", str(SMOKE), "--out", str(run_dir), *sets(*FAST, *LONG)]
    proc = start(*args)
    deadline = time.monotonic() + 180
    while not steps_logged(run_dir):
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert time.monotonic() < deadline, "no step finished in time"
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)

    assert proc.returncode == 0, stderr
    done = steps_logged(run_dir)
    assert 1 <= len(done) < 50 and done == list(range(1, len(done) + 1))
    assert checkpoints(run_dir) == [f"step_{len(done)}"], "the checkpoint must hold exactly the logged steps"
    line = next(line for line in stdout.splitlines() if "resume with:" in line)
    assert line.startswith(f"SIGTERM: stopped after step {len(done)}/50")
    assert shlex.split(line.split("resume with: ", 1)[1]) == ["pettingllms", *args, "--resume"]
