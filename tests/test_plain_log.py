"""With stdout redirected to a file (nohup, CI, slurm), `train` writes one plain line per step as it goes (issue 30)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from pettingllms_cli.training.progress import PlainProgress, status_line
from tests.conftest import FAST

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "experiments" / "smoke.yaml"
STEP_LINE = re.compile(r"^step 1/3  success \d\.\d\d .*caller r .* loss .*verifier r .* tok/s  elapsed \d+:\d\d:\d\d  eta ", re.M)


def test_redirected_run_logs_each_step_before_it_ends(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    sets = [a for s in FAST for a in ("--set", s)]
    args = [sys.executable, "-m", "pettingllms_cli", "train", str(SMOKE), "--out", str(tmp_path / "run"), "--max-steps", "3"]
    with log.open("w") as out:
        proc = subprocess.Popen([*args, *sets], cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=out)
        seen_while_running = False
        while proc.poll() is None:  # read the log as `tail -f` would, while the run goes on
            seen_while_running = seen_while_running or bool(STEP_LINE.search(log.read_text()))
            time.sleep(0.05)
    assert proc.returncode == 0, log.read_text()
    assert seen_while_running, log.read_text()
    lines = [line for line in log.read_text().splitlines() if line.startswith("step ")]
    assert [line.split()[1] for line in lines] == ["1/3", "2/3", "3/3"], lines


def test_plain_progress_counts_from_a_resume_and_flushes(tmp_path: Path) -> None:
    from rich.console import Console

    with (tmp_path / "log").open("w") as file:
        bar = PlainProgress(Console(file=file))  # a file: not a terminal
        task = bar.add_task("run", total=10, completed=4, status="")
        bar.update(task, advance=1)  # a step train.log_every does not show
        row = {"step": 6, "team_success_rate": 0.5, "heldout_success_rate": 0.25, "reward/a": 0.4, "loss/a": None}
        bar.update(task, advance=1, status=status_line({**row, "tokens_per_second": 12.0}))
        text = (tmp_path / "log").read_text()  # before the file is closed: flushed
    expected = "step 6/10  success 0.50  held-out 0.25  a r 0.40 loss -  12 tok/s  elapsed 0:00:00  eta 0:00:00"
    assert text.startswith(expected), text
    assert len(text.splitlines()) == 1


def test_terminal_bar_shows_eta_and_each_agents_reward_and_loss() -> None:
    from rich.console import Console

    from pettingllms_cli.training.progress import progress_bar

    console = Console(force_terminal=True, width=200, record=True, color_system=None)
    row = {"team_success_rate": 0.5, "reward/caller": 0.4, "loss/caller": 0.0123, "reward/verifier": 0.55}
    with progress_bar(console) as bar:
        assert not isinstance(bar, PlainProgress)  # a terminal gets rich's live bar
        task = bar.add_task("smoke", total=10, completed=0, status="")
        bar.update(task, advance=3, status=status_line({**row, "loss/verifier": -0.004, "tokens_per_second": 85.0}))
    shown = console.export_text().splitlines()[-1]
    assert re.search(r"smoke .* 3/10 \d+:\d\d:\d\d eta \d+:\d\d:\d\d ", shown), shown  # after one update, not -:--:--
    assert "caller r 0.40 loss 0.0123" in shown and "verifier r 0.55 loss -0.0040" in shown and "85 tok/s" in shown, shown
