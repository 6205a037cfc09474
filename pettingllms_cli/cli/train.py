"""`train`, `validate` and `schema`: run an experiment, or check one without loading weights."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Annotated

import typer

from pettingllms_cli import distributed
from pettingllms_cli.cli.common import SetOpt, app, check_ready, console, held_out_count, load_experiment, out_path, say
from pettingllms_cli.errors import UserError
from pettingllms_cli.spec.limits import MAX_SEED, MAX_STEPS


@app.command()
def train(
    spec: Annotated[Path, typer.Argument(help="Experiment YAML file.")],
    out: Annotated[str | None, typer.Option(help="Run directory (default: output_dir or runs/<name>).")] = None,
    set_: SetOpt = None,
    max_steps: Annotated[int | None, typer.Option(min=1, max=MAX_STEPS, help="Override train.steps.")] = None,
    seed: Annotated[int | None, typer.Option(min=0, max=MAX_SEED, help="Override the seed.")] = None,
    resume: Annotated[bool, typer.Option(help="Continue from the newest complete checkpoint in the run directory.")] = False,
    overwrite: Annotated[bool, typer.Option(help="Replace an existing run directory.")] = False,
    force: Annotated[
        bool, typer.Option(help="With --resume: continue although the spec differs from the run's (recorded in resumes.jsonl).")
    ] = False,
) -> None:
    """Train the experiment's agents together and write a run directory.

    SIGINT/SIGTERM stop after the current step with a checkpoint; --resume continues exactly.
    """
    run_dir = out_path(out)
    experiment = load_experiment(spec, set_, max_steps, seed)
    check_ready(experiment)
    if force and not resume:
        raise UserError("--force only applies with --resume (to continue a run with a changed spec)")
    if resume and overwrite:  # before the lock, which creates the run directory
        raise UserError("--resume and --overwrite contradict each other: --resume continues the run, --overwrite deletes it")
    from pettingllms_cli.training.loop import train as run_training

    run_dir = run_dir or experiment.run_dir
    again = [*distributed.relaunch(), "train", str(spec), "--out", str(run_dir)]
    again += [arg for item in set_ or [] for arg in ("--set", item)]
    again += ["--max-steps", str(max_steps)] if max_steps is not None else []
    again += ["--seed", str(seed)] if seed is not None else []
    resume_command = shlex.join([*again, "--resume"])
    run_training(
        experiment, run_dir, resume=resume, overwrite=overwrite, console=console, force=force, resume_command=resume_command
    )


@app.command()
def validate(spec: Annotated[Path, typer.Argument(help="Experiment YAML file.")], set_: SetOpt = None) -> None:
    """Check a spec (names, roles, models, budgets) without loading any weights."""
    experiment = load_experiment(spec, set_)
    check_ready(experiment)
    held_out = held_out_count(experiment)
    roles = ", ".join(f"{a}: {'/'.join(s.roles)}" for a, s in experiment.agents.items())
    say(f"{spec}: ok ({experiment.env.name}, {len(experiment.agents)} agent(s): {roles}; {held_out} held-out problems)")


@app.command()
def schema() -> None:
    """Print the experiment spec's JSON schema."""
    from pettingllms_cli.spec import Experiment

    print(json.dumps(Experiment.model_json_schema(), indent=2))
