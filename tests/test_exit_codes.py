"""Exit codes tell the truth (issue 17), seen from outside as a script or a scheduler sees them:
0 success, 1 a failed check, 2 a user error, 130 interrupted. Every command runs as a subprocess.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import FAST

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "experiments" / "smoke.yaml"
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def start(*args: str) -> subprocess.Popen:
    """The CLI as a terminal's foreground command: SIGINT at its default disposition. A shell starts background jobs
    (`make test &`, `nohup ... &`) with SIGINT ignored and children inherit that, so Python would never see Ctrl-C."""
    return subprocess.Popen(
        [sys.executable, "-m", "pettingllms_cli", *args],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pettingllms_cli", *args], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=timeout
    )


def sets(*items: str) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


def lock_held(run_dir: Path) -> bool:
    """Whether some process holds the run directory's writer lock."""
    from pettingllms_cli.training.lock import LOCK_FILE

    try:
        fd = os.open(run_dir / LOCK_FILE, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def wait_until(ready, proc: subprocess.Popen, what: str, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, f"the command ended before {what}: {proc.stderr.read() if proc.stderr else ''}"
        assert time.monotonic() < deadline, f"no {what} in {timeout} s"
        time.sleep(0.02)


def test_envs_check_with_a_failing_reference_exits_1(tmp_path: Path) -> None:
    data = tmp_path / "mbpp.jsonl"
    records = [
        {
            "task_id": 1,
            "text": "Add two numbers.",
            "code": "def add(a, b):\n    return a + b",
            "test_list": ["assert add(1, 2) == 3"],
        },
        {"task_id": 2, "text": "Double a number.", "code": "def dbl(x):\n    return x + 1", "test_list": ["assert dbl(3) == 6"]},
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    done = run("envs", "check", "code_v0", "--data", str(data), "--limit", "2")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "reference does not solve" in done.stdout and "mbpp-2" in done.stdout
    assert "0 failed" not in done.stdout


@pytest.mark.parametrize(
    ("args", "code", "stream"),
    [
        (["validate", str(SMOKE)], 0, "stdout"),
        (["validate", "no/such/spec.yaml"], 2, "stderr"),
        (["validate", str(SMOKE), "--set", "algorithm.group_size=0"], 2, "stderr"),
        (["envs", "check", "no_such_env_v0"], 2, "stderr"),
        (["train", str(SMOKE), "--force"], 2, "stderr"),
    ],
)
def test_success_is_0_and_user_errors_are_2_with_one_line(args: list[str], code: int, stream: str) -> None:
    done = run(*args)
    assert done.returncode == code, done.stdout + done.stderr
    text = getattr(done, stream).strip()
    assert len(text.splitlines()) == 1, text
    assert ("error:" in text) == (code == 2)


def test_ctrl_c_during_eval_exits_130_with_one_line(tmp_path: Path) -> None:
    # A folder that looks like a run, so `eval --out` into it takes its writer lock: the lock held says
    # the eval is under way (a signal before the command starts would test Python's start-up instead).
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    shutil.copy(SMOKE, run_dir / "spec.yaml")
    (run_dir / "metrics.jsonl").write_text("")
    proc = start("eval", str(SMOKE), "--episodes", "64", "--out", str(run_dir / "eval.json"))
    wait_until(lambda: lock_held(run_dir), proc, "writer lock")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("aborted:"), err
    assert "Traceback" not in err
    assert not (run_dir / "eval.json").exists() and not lock_held(run_dir)


def test_second_ctrl_c_during_train_exits_130(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = start("train", str(SMOKE), "--out", str(run_dir), *sets(*FAST, "train.steps=50", "train.checkpoint_every=100"))
    wait_until(lambda: (run_dir / "metrics.jsonl").is_file(), proc, "training step")
    proc.send_signal(signal.SIGINT)  # first: finish the step and checkpoint ...
    time.sleep(0.05)
    proc.send_signal(signal.SIGINT)  # ... second: abort at once
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("aborted: second SIGINT"), err
    assert "Traceback" not in err
