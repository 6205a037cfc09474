"""One writer per run directory (issue 17): a second `train`, `--resume`, `--overwrite` or `eval --out` on a
run directory a live process writes is refused at once, and a lock left by a killed process never blocks.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pettingllms_cli.errors import UserError
from pettingllms_cli.training.lock import LOCK_FILE, acquire_lock, release_lock, writer_lock
from tests.conftest import FAST
from tests.test_exit_codes import lock_held, run, sets, start, wait_until

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "experiments" / "smoke.yaml"
STEPS = 4
TRAIN = ["train", str(SMOKE), *sets(*FAST, f"train.steps={STEPS}", "train.checkpoint_every=1")]

HOLD = "import sys, time; from pathlib import Path; from pettingllms_cli.training.lock import acquire_lock; \
acquire_lock(Path(sys.argv[1]), 'then retry'); print('held', flush=True); time.sleep(600)"


def steps_logged(run_dir: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_a_held_lock_refuses_a_second_writer_and_names_its_pid(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(UserError) as err:
            acquire_lock(tmp_path, "then resume with: pettingllms train X --resume")
        message = str(err.value)
        assert f"pid {holder.pid}" in message and f"kill {holder.pid}" in message and message.endswith("--resume")
        assert "\n" not in message
    finally:
        holder.kill()
        holder.wait()
    # The kernel released the dead holder's flock; its lock file (naming a dead pid) does not block.
    assert (tmp_path / LOCK_FILE).is_file()
    acquire_lock(tmp_path, "then retry")
    assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
    release_lock(tmp_path)
    assert not (tmp_path / LOCK_FILE).exists(), "a released lock leaves no file behind"


def test_the_lock_is_reentrant_in_one_process(tmp_path: Path) -> None:
    with writer_lock(tmp_path, "then retry"):
        with writer_lock(tmp_path, "then retry"):  # compare holds it around train, which takes it again
            assert lock_held(tmp_path)
        assert lock_held(tmp_path), "the inner release must not free the outer hold"
    assert not lock_held(tmp_path)


def test_second_train_on_a_live_run_is_refused_and_the_first_finishes_alone(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    first = start(*TRAIN, "--out", str(run_dir))
    try:
        wait_until(lambda: (run_dir / "checkpoints" / "step_1").is_dir(), first, "first checkpoint")
        first.send_signal(signal.SIGSTOP)  # alive and holding the lock while the others try
        for extra in ([], ["--resume"], ["--overwrite"]):
            began = time.monotonic()
            second = run(*TRAIN, "--out", str(run_dir), *extra, "--set", "algorithm.lr=0.02" if extra else "seed=0")
            assert second.returncode == 2, second.stdout + second.stderr
            err = second.stderr.strip()
            assert len(err.splitlines()) == 1 and f"pid {first.pid}" in err and "--resume" in err, err
            assert time.monotonic() - began < 120, "the second writer must not wait for the first"
            assert (run_dir / "checkpoints" / "step_1").is_dir(), f"{extra} touched the live run"
    finally:
        first.send_signal(signal.SIGCONT)
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    assert steps_logged(run_dir) == list(range(1, STEPS + 1)), "the refused writers must not add or repeat steps"
    assert "lr: 0.01" in (run_dir / "spec.yaml").read_text()
    assert not (run_dir / LOCK_FILE).exists()


def test_resume_after_sigkill_of_the_lock_holder(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    first = start(*TRAIN, "--out", str(run_dir))
    wait_until(lambda: (run_dir / "checkpoints" / "step_1").is_dir(), first, "first checkpoint")
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    assert (run_dir / LOCK_FILE).is_file() and not lock_held(run_dir), "the kernel frees a dead holder's lock"

    resumed = run(*TRAIN, "--out", str(run_dir), "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert steps_logged(run_dir) == list(range(1, STEPS + 1))


def test_eval_out_into_a_live_run_is_refused(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "spec.yaml").write_text(SMOKE.read_text())
    (run_dir / "metrics.jsonl").write_text("")
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        done = run("eval", str(SMOKE), "--episodes", "1", "--out", str(run_dir / "mine.json"))
    finally:
        holder.kill()
        holder.wait()
    assert done.returncode == 2 and f"pid {holder.pid}" in done.stderr and "run this eval again" in done.stderr
    assert not (run_dir / "mine.json").exists()


def test_compare_refuses_a_run_another_process_writes(tmp_path: Path, monkeypatch, capsys) -> None:
    from tests.conftest import run_cli
    from tests.test_compare import write_specs

    solo, team = write_specs(tmp_path)
    out = tmp_path / "out"
    busy = out / "solo" / "seed0"
    busy.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(busy)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        capsys.readouterr()
        code = run_cli(["compare", str(solo), str(team), "--seeds", "1", "--max-steps", "1", "--out", str(out)], monkeypatch)
    finally:
        holder.kill()
        holder.wait()
    err = capsys.readouterr().err.strip()
    assert code == 2 and f"pid {holder.pid}" in err and "rerun this compare" in err, err
    assert not (busy / "spec.yaml").exists(), "compare wrote into a run another process holds"
