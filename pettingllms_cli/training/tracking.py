"""Experiment trackers (`train.report_to`): every metrics.jsonl row also goes to TensorBoard, W&B or trackio.

metrics.jsonl stays the record (reports, compare and --resume read it); trackers are views of it. TensorBoard writes
event files into the run directory's `tb/` and needs no network. wandb and trackio are optional packages: they are
imported only when named, and checked before any weights load so a missing one costs seconds, not a model load.
Each keeps its own settings (WANDB_MODE=offline, WANDB_PROJECT, TRACKIO_PROJECT, ...), see docs/tracking.md.
"""

from __future__ import annotations

import importlib
import math
import os
from pathlib import Path
from types import ModuleType

from pettingllms_cli import distributed
from pettingllms_cli.analysis.curves import step_zero
from pettingllms_cli.errors import UserError
from pettingllms_cli.jsonio import read_json
from pettingllms_cli.spec import Experiment

TB_DIR = "tb"  # TensorBoard's event files, under the run directory
OPTIONAL = ("wandb", "trackio")  # not dependencies: `pip install wandb` / `pip install trackio`
PROJECT = "pettingllms"  # the W&B / trackio project when WANDB_PROJECT / TRACKIO_PROJECT is unset


def check_trackers(report_to: list[str]) -> None:
    """One line naming the install when a tracker in `report_to` does not import (call before any weights load)."""
    for name in report_to:
        if name in OPTIONAL:
            _optional(name)


def _optional(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError:
        raise UserError(
            f"train.report_to: {name} is not installed; install it with `pip install {name}`, "
            f"or remove {name} from train.report_to"
        ) from None


def scalars(row: dict) -> dict[str, float]:
    """The row's numbers a tracker can plot: no step, no null, no flag, no text.

    >>> scalars({"step": 3, "team_success_rate": 0.5, "loss/a": None, "tokens_generated": 40, "ok": True, "x": "y"})
    {'team_success_rate': 0.5, 'tokens_generated': 40}
    """
    return {
        k: v
        for k, v in row.items()
        if k != "step" and isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    }


def held_out_start(spec: Experiment, run_dir: Path) -> dict:
    """Step 0 of the held-out curve, as the report draws it: the untrained team on the same `eval_subset` problems
    (eval_before.json); only `step` when train.eval_every is unset or eval_before.json does not say."""
    point = step_zero(read_json(run_dir / "eval_before.json"), spec.train.eval_subset) if spec.train.eval_every else None
    return {"step": 0, **({"heldout_success_rate": point.rate} if point else {})}


class Trackers:
    """The trackers of one run: `log` each metrics row, `end` with the held-out scores and the report's plots.

    `resumed_at` is the checkpoint's step on --resume: TensorBoard hides its events past that step, as metrics.jsonl
    was cut back to it. Use it as a context manager; leaving closes every tracker however the run ends.
    """

    def __init__(self, spec: Experiment, run_dir: Path, resumed_at: int = 0) -> None:
        self.tensorboard = self.wandb = self.trackio = None
        report_to = spec.train.report_to if distributed.is_main() else []  # rank 0 alone logs, as it alone writes files
        name, config = spec.name, spec.model_dump(mode="json")
        if "tensorboard" in report_to:
            from torch.utils.tensorboard import SummaryWriter  # torch's writer; the `tensorboard` package holds its format

            self.tensorboard = SummaryWriter(str(run_dir / TB_DIR), purge_step=resumed_at + 1 if resumed_at else None)
        if "wandb" in report_to:  # WANDB_MODE=offline etc. are read by wandb itself; its files go in run_dir/wandb
            project = os.environ.get("WANDB_PROJECT", PROJECT)
            self.wandb = _optional("wandb").init(project=project, name=name, dir=str(run_dir), config=config)
        if "trackio" in report_to:
            project = os.environ.get("TRACKIO_PROJECT", PROJECT)
            self.trackio = _optional("trackio").init(project=project, name=name, config=config)
        if report_to and not resumed_at:  # a resume's trackers already hold step 0
            self.log(held_out_start(spec, run_dir))

    def __enter__(self) -> Trackers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def log(self, row: dict) -> None:
        """One metrics.jsonl row at its step."""
        step, values = row["step"], scalars(row)
        if not values:
            return
        if self.tensorboard is not None:
            for key, value in values.items():
                self.tensorboard.add_scalar(key, value, global_step=step)
            self.tensorboard.flush()  # visible to a TensorBoard that is watching, as metrics.jsonl is
        if self.wandb is not None:
            self.wandb.log(values, step=step)
        if self.trackio is not None:
            self.trackio.log(values, step=step)

    def end(self, run_dir: Path, step: int) -> None:
        """After the final held-out eval: the before/after held-out success, and the report's plots as images."""
        ends = {
            f"eval_{when}/team_success_rate": (read_json(run_dir / f"eval_{when}.json") or {}).get("team_success_rate")
            for when in ("before", "after")
        }
        self.log({"step": step, **ends})
        plots = sorted((run_dir / "plots").glob("*.png"))
        if self.tensorboard is not None and plots:
            from matplotlib.image import imread

            for plot in plots:
                self.tensorboard.add_image(f"plots/{plot.stem}", imread(plot)[..., :3], global_step=step, dataformats="HWC")
        if self.wandb is not None and plots:
            wandb = _optional("wandb")
            self.wandb.log({f"plots/{p.stem}": wandb.Image(str(p)) for p in plots}, step=step)
        if self.trackio is not None and plots:
            image = getattr(_optional("trackio"), "Image", None)  # trackio has images since 0.2
            if image is not None:
                self.trackio.log({f"plots/{p.stem}": image(str(p)) for p in plots}, step=step)

    def close(self) -> None:
        if self.tensorboard is not None:
            self.tensorboard.close()
        for run in (self.wandb, self.trackio):
            if run is not None:
                run.finish()
        self.tensorboard = self.wandb = self.trackio = None
