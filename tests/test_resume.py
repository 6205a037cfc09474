"""Exact resume (issue 7): a run killed at any moment and resumed ends like an uninterrupted one.

The reference is an uninterrupted 4-step run of experiments/smoke.yaml (shrunk by FAST);
resumed runs must match it: adapters and AdamW moments within 1e-6, metrics.jsonl equal except
the wall-clock fields.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from unittest import mock

import pytest
import torch
from safetensors.torch import load_file

from pettingllms_cli.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "experiments" / "smoke.yaml"
# Smaller than smoke.yaml's defaults so four steps take seconds; groups of 4 so both agents see reward spread and update.
FAST = ["algorithm.group_size=4", "train.problems_per_step=1", "env.eval_problems=1", "train.max_new_tokens=6", "env.max_turns=1"]
STEPS = 4


def fast_spec(*extra: str):
    from pettingllms_cli.spec import load_spec

    return load_spec(SMOKE, [*FAST, f"train.steps={STEPS}", *extra])


def train_in_process(run_dir: Path, *extra: str, resume: bool = False, force: bool = False) -> Path:
    from rich.console import Console

    from pettingllms_cli.training.loop import train

    with mock.patch("pettingllms_cli.training.loop.write_report"):  # plots take seconds and are not under test here
        return train(fast_spec(*extra), run_dir, resume=resume, force=force, console=Console(quiet=True))


def cli(run_dir: Path, *args: str) -> list[str]:
    sets = [arg for item in FAST for arg in ("--set", item)]
    return [
        sys.executable,
        "-m",
        "pettingllms_cli",
        "train",
        str(SMOKE),
        "--out",
        str(run_dir),
        *sets,
        "--set",
        f"train.steps={STEPS}",
        *args,
    ]


def run_cli_in_process(args: list[str]) -> tuple[int, str]:
    """`pettingllms ARGS` through cli.main in this process (report plots skipped); returns (exit code, stderr)."""
    from pettingllms_cli.cli import main

    err = io.StringIO()
    with mock.patch.object(sys, "argv", ["pettingllms", *args]), mock.patch("pettingllms_cli.training.loop.write_report"):
        with redirect_stdout(io.StringIO()), redirect_stderr(err):
            try:
                main()
            except SystemExit as e:
                return int(e.code or 0), err.getvalue()
    return 0, err.getvalue()


def metrics(run_dir: Path) -> list[dict]:
    from pettingllms_cli.training.loop import WALL_CLOCK_KEYS

    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if k not in WALL_CLOCK_KEYS} for row in rows]


def final_state(run_dir: Path, step: int = STEPS) -> dict[str, torch.Tensor]:
    """Adapter weights of every agent and the AdamW moments, flattened to name -> tensor."""
    folder = run_dir / "checkpoints" / f"step_{step}"
    tensors = {}
    for agent_dir in sorted(p for p in folder.iterdir() if p.is_dir()):
        tensors |= {f"{agent_dir.name}/{k}": v for k, v in load_file(agent_dir / "adapter_model.safetensors").items()}
    state = torch.load(folder / "trainer_state.pt", weights_only=True)
    for adapter, opt in state["optimizers"].items():
        for idx, moments in opt["state"].items():
            tensors |= {f"opt/{adapter}/{idx}/{k}": v for k, v in moments.items() if torch.is_tensor(v)}
    return tensors


def assert_same_run(run: Path, reference: Path) -> None:
    assert metrics(run) == metrics(reference)
    got, want = final_state(run), final_state(reference)
    assert got.keys() == want.keys()
    for name in want:
        assert torch.allclose(got[name].float(), want[name].float(), rtol=0, atol=1e-6), name
    after = json.loads((run / "eval_after.json").read_text())
    assert after["team_success_rate"] == json.loads((reference / "eval_after.json").read_text())["team_success_rate"]


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """One torch thread here and in the subprocesses (OMP_NUM_THREADS=1): same kernels, and fast on a busy CPU."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = train_in_process(tmp_path_factory.mktemp("reference") / "run")
    rows = metrics(run)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    lora_b = [v for k, v in final_state(run).items() if "lora_B" in k]
    assert lora_b and all(v.abs().sum() > 0 for v in lora_b), "the reference run must move every adapter"
    return run


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"training ended before {path} appeared: {proc.stderr.read() if proc.stderr else ''}"
        assert time.monotonic() < deadline, f"{path} did not appear in {timeout} s"
        time.sleep(0.02)


def test_sigkill_then_resume_matches_uninterrupted_run(reference: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cli(run), cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for(run / "checkpoints" / "step_1" / "trainer_state.pt", proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert not (run / "checkpoints" / f"step_{STEPS}").exists(), "the run finished before it was killed"

    code, err = run_cli_in_process(cli(run, "--resume")[3:])  # the same command line, without a second import
    assert code == 0, err
    resumes = [json.loads(line) for line in (run / "resumes.jsonl").read_text().splitlines()]
    assert len(resumes) == 1 and 1 <= resumes[0]["from_step"] < STEPS and not resumes[0]["forced"]
    assert_same_run(run, reference)


def test_interrupted_checkpoint_write_is_ignored_on_resume(reference: Path, tmp_path: Path) -> None:
    """Leftovers of a kill: a half-written step_3.tmp-PID, a step_4 without trainer_state.pt, a cut metrics line."""
    run = tmp_path / "run"
    shutil.copytree(reference, run)
    checkpoints = run / "checkpoints"
    shutil.rmtree(checkpoints / "step_3")
    (checkpoints / "step_4" / "trainer_state.pt").unlink()
    stale = checkpoints / "step_3.tmp-999999999"  # a pid that cannot be alive
    shutil.copytree(reference / "checkpoints" / "step_3", stale)
    (stale / "trainer_state.pt").write_bytes(b"\x80\x02half")
    lines = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
    (run / "metrics.jsonl").write_text("".join(lines[:3]) + lines[3][:25])  # step 3 done, step 4 cut mid-line
    (run / "eval_after.json").unlink()

    train_in_process(run, resume=True)
    assert not stale.exists(), "the stale temporary checkpoint was not cleaned up"
    assert json.loads((run / "resumes.jsonl").read_text())["from_step"] == 2
    assert_same_run(run, reference)


def test_resume_with_a_different_spec_is_refused_unless_forced(reference: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(reference, run)
    shutil.rmtree(run / "checkpoints" / "step_4")
    with pytest.raises(UserError, match=r"different spec.*algorithm\.lr: 0\.01 -> 0\.02.*--force"):
        train_in_process(run, "algorithm.lr=0.02", resume=True)
    assert (run / "checkpoints" / "step_3" / "trainer_state.pt").is_file()

    train_in_process(run, "algorithm.lr=0.02", resume=True, force=True)
    record = json.loads((run / "resumes.jsonl").read_text())
    assert record["forced"] and record["from_step"] == 3 and record["changes"] == {"algorithm.lr": [0.01, 0.02]}
    assert "lr: 0.02" in (run / "spec.yaml").read_text()
    state = torch.load(run / "checkpoints" / "step_4" / "trainer_state.pt", weights_only=True)
    assert all(g["lr"] == 0.02 for opt in state["optimizers"].values() for g in opt["param_groups"])
    assert metrics(run)[:3] == metrics(reference)[:3]
