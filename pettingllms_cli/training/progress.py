"""How `train` shows its progress: rich's bar in a terminal, one plain flushed line per step anywhere else.

Under nohup, CI or slurm stdout is a file, and rich's live bar draws nothing there until the run ends; a plain line
per step lets `tail -f` follow the run as metrics.jsonl does.
"""

from __future__ import annotations

import contextlib
import time
from datetime import timedelta

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TaskID, TextColumn, TimeElapsedColumn
from rich.text import Text


def progress_bar(console: Console) -> Progress | PlainProgress:
    """Rich's bar (with an ETA) in a terminal; elsewhere one plain line per shown step."""
    if not console.is_terminal:
        return PlainProgress(console)
    return TrainProgress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        EtaColumn(),
        TextColumn("{task.fields[status]}"),
        console=console,
    )


class TrainProgress(Progress):
    """Rich's Progress that remembers where a task began (a resume's step), so the ETA counts this process's steps."""

    def add_task(self, description: str, start: bool = True, total: float | None = 100.0, completed: int = 0, **fields) -> TaskID:
        return super().add_task(description, start, total, completed, first=completed, **fields)


class EtaColumn(ProgressColumn):
    """`eta H:MM:SS` at this process's pace since the bar began, as the plain lines count it.

    Rich's own TimeRemainingColumn estimates speed from the last 30 s only: with steps longer than that it never
    shows an ETA.
    """

    def render(self, task: Task) -> Text:
        left = eta(task.elapsed or 0.0, int(task.completed - task.fields.get("first", 0)), task.total, int(task.completed))
        return Text(f"eta {'-:--:--' if left is None else _clock(left)}", style="progress.remaining")


def status_line(m: dict) -> str:
    """The bar's status: team success, held-out where measured, best-of-K (tree), per-agent reward and loss, speed."""
    heldout = f"  held-out {_num(m['heldout_success_rate'], 2)}" if "heldout_success_rate" in m else ""
    best = f"  best-of-K {m['best_branch_success_rate']:.2f}" if "best_branch_success_rate" in m else ""
    speed = f"{_num(m.get('tokens_per_second'), 0)} tok/s"
    return f"success {_num(m.get('team_success_rate'), 2)}{heldout}{best}  {per_agent(m)}  {speed}"


def per_agent(m: dict) -> str:
    """`caller r 0.40 loss 0.012` for each agent in the row (a null is shown as `-`)."""
    agents = sorted(key.split("/", 1)[1] for key in m if key.startswith("loss/"))
    return "  ".join(f"{a} r {_num(m.get(f'reward/{a}'), 2)} loss {_num(m.get(f'loss/{a}'), 4)}" for a in agents)


class PlainProgress:
    """The part of rich's `Progress` that `train` uses, as one flushed line per step that brings a status."""

    def __init__(self, console: Console) -> None:
        self.console, self.total, self.done, self.first, self.began = console, None, 0, 0, time.monotonic()

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def add_task(self, description: str, total: int | None, completed: int = 0, status: str = "") -> int:
        self.total, self.done, self.first, self.began = total, completed, completed, time.monotonic()
        return 0

    def update(self, task: int, advance: int = 1, status: str | None = None) -> None:
        self.done += advance
        if status is None:  # train.log_every did not show this step
            return
        elapsed = time.monotonic() - self.began
        line = plain_line(self.done, self.total, status, elapsed, eta(elapsed, self.done - self.first, self.total, self.done))
        self.console.print(line, markup=False, highlight=False, soft_wrap=True)
        with contextlib.suppress(OSError, ValueError):  # a closed or odd stdout must not stop training
            self.console.file.flush()


def eta(elapsed: float, ran: int, total: int | None, done: int) -> float | None:
    """Time left at this process's pace (a resume's earlier steps took no time here); None when unknown."""
    return None if total is None or ran <= 0 else elapsed / ran * max(0, total - done)


def plain_line(step: int, total: int | None, status: str, elapsed: float, left: float | None) -> str:
    """One log line for a step.

    >>> plain_line(3, 10, "success 0.50", 62.0, 144.7)
    'step 3/10  success 0.50  elapsed 0:01:02  eta 0:02:25'
    >>> plain_line(3, None, "success 0.50", 62.0, None)
    'step 3  success 0.50  elapsed 0:01:02'
    """
    of = "" if total is None else f"/{total}"
    left_part = "" if left is None else f"  eta {_clock(left)}"
    return f"step {step}{of}  {status}  elapsed {_clock(elapsed)}{left_part}"


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _clock(seconds: float) -> str:
    return str(timedelta(seconds=round(seconds)))
