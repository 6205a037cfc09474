"""Usage mistakes at the command line (issue 30): one `error:` line and exit 2, never a traceback; bare `pettingllms`
prints help and `--version` the version. Each case runs as a subprocess, as a user's shell runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pettingllms_cli import __version__

ROOT = Path(__file__).resolve().parents[1]
BOX = set("╭╮╰╯│─━┃")  # rich's traceback (and panel) frame


def run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "pettingllms_cli", *args], cwd=ROOT, env=env, capture_output=True, text=True)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["trian"], "No such command 'trian'"),
        (["train"], "Missing argument"),
        (["train", "experiments/smoke.yaml", "--no-such-flag"], "No such option: --no-such-flag"),
        (["envs", "chek"], "No such command 'chek'"),
    ],
)
def test_usage_error_is_one_line_and_exit_2(args: list[str], says: str) -> None:
    done = run(*args)
    text = done.stdout + done.stderr
    assert done.returncode == 2, text
    assert "Traceback" not in text and not BOX & set(text), text
    assert done.stderr.strip().startswith("error:") and says in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_bare_command_prints_help() -> None:
    done = run()
    assert done.returncode == 0, done.stderr
    assert "Usage:" in done.stdout and "COMMAND" in done.stdout and "train" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr and "error:" not in done.stderr


def test_version_prints_the_version() -> None:
    done = run("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"pettingllms {__version__}", done.stdout + done.stderr
