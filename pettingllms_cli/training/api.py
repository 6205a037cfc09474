"""The Python API (`import pettingllms_cli`): the CLI's commands as functions, with the CLI's checks and one-line
errors (`UserError`, its message the line the CLI prints) and without library warning noise (docs/python.md)."""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path

from rich.console import Console

from pettingllms_cli.errors import UserError
from pettingllms_cli.models.loader import check_models
from pettingllms_cli.spec import Experiment, load_spec
from pettingllms_cli.training.compare import compare as run_compare
from pettingllms_cli.training.eval_target import run_eval
from pettingllms_cli.training.export import export
from pettingllms_cli.training.loop import train as run_training
from pettingllms_cli.training.play import play

__all__ = ["compare", "evaluate", "export", "load_spec", "play", "quiet_libraries", "train"]


def quiet_libraries() -> None:
    """What the CLI hides, hidden for Python callers too: transformers' info and progress bars, deprecation notes,
    bitsandbytes' note on an optional CPU kernel pettingllms keeps off (models/loader.py `keep_4bit_layout`)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.jit")
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)


def _spec(spec: Experiment | str | Path, overrides: list[str] | None = None) -> Experiment:
    if isinstance(spec, Experiment):
        if overrides:
            raise UserError("overrides apply to a spec file; pass its path, or change the Experiment with model_copy")
        return spec
    return load_spec(spec, overrides)


def train(
    spec: Experiment | str | Path,
    out: str | Path | None = None,
    overrides: list[str] | None = None,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
) -> Path:
    """Train a spec (an Experiment or a YAML path with `--set`-style overrides) into `out` (default: the spec's run
    directory); returns the run directory. `progress=False` prints nothing."""
    experiment = _spec(spec, overrides)
    check_models(experiment.models)
    run_dir = Path(out) if out is not None else experiment.run_dir
    return run_training(experiment, run_dir, resume=resume, overwrite=overwrite, console=Console(quiet=not progress))


def evaluate(
    target: str | Path,
    data: str | None = None,
    split: str = "test",
    episodes: int | None = None,
    seed: int | None = None,
    temperature: float | None = None,
) -> dict:
    """Score a run (its newest checkpoint), a checkpoints/step_N folder or a spec (the untrained base), as `eval` does."""
    return run_eval(Path(target), data=data, split=split, episodes=episodes, seed=seed, temperature=temperature)


def compare(
    specs: list[str | Path],
    out: str | Path = "runs/compare",
    seeds: int = 3,
    max_steps: int | None = None,
    budget: str = "actions",
    allow_unequal: bool = False,
    episodes: int | None = None,
    threshold: float = 0.5,
    window: int = 3,
    data: str | None = None,
    progress: bool = True,
    vote: bool = True,
) -> dict:
    """Train each spec for `seeds` seeds at equal compute and score all on the same held-out problems, as `compare` does."""
    for path in specs:
        check_models(load_spec(path).models)
    return run_compare(
        [Path(p) for p in specs],
        seeds,
        max_steps,
        Path(out),
        allow_unequal,
        episodes,
        threshold,
        window,
        console=Console(quiet=not progress),
        budget=budget,
        data=data,
        vote=vote,
    )
