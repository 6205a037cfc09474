"""Which code trained a run, and when: recorded in resolved.json so the report's header can name it.

The commit is the git commit of the checkout the package runs from (with "+changes" when tracked files differ from
it); an installed wheel has none, and the report then says "unknown".
"""

from __future__ import annotations

import datetime as dt
import subprocess
from pathlib import Path

import pettingllms_cli


def git_commit(folder: Path) -> str | None:
    """The checkout's short commit, "+changes" when tracked files were edited; None outside a git checkout."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=5, check=True)
        return done.stdout.strip()

    try:
        commit = git("rev-parse", "--short=12", "HEAD")
        edited = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{commit}+changes" if edited else commit


def provenance() -> dict[str, str | None]:
    """{"commit", "version", "started"} of this process."""
    return {
        "commit": git_commit(Path(pettingllms_cli.__file__).resolve().parent),
        "version": pettingllms_cli.__version__,
        "started": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }
