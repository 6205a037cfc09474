"""What every command shares: the typer apps, the console, plain lines, `--out` and `--set`, and the
checks that run before any weights load."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from pettingllms_cli.errors import UserError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Train teams of LLM agents with multi-agent RL (AT-GRPO).")
models_app = typer.Typer(no_args_is_help=True, help="Built-in offline models.")
envs_app = typer.Typer(no_args_is_help=True, help="Registered environments.")
app.add_typer(models_app, name="models")
app.add_typer(envs_app, name="envs")
console = Console()


def _print_version(value: bool) -> None:
    if value:
        from pettingllms_cli import __version__

        say(f"pettingllms {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Train teams of LLM agents with multi-agent RL (AT-GRPO)."""


def say(message: str) -> None:
    """Print a plain line: paths and names are never read as rich markup (`[x]` in a path stays)."""
    console.print(message, markup=False, highlight=False, soft_wrap=True)


def out_path(value: str | None) -> Path | None:
    """`--out` as a path; an empty one is a usage error (Path("") is the current folder, which --overwrite would clear)."""
    if value is None:
        return None
    if not value.strip():
        raise UserError(f"--out {value!r}: an empty path; name a folder (e.g. --out runs/my_run)")
    return Path(value)


SetOpt = Annotated[list[str] | None, typer.Option("--set", help="Override a spec field: dotted.key=value (repeatable).")]


def load_experiment(spec_path: Path, overrides: list[str] | None, max_steps: int | None = None, seed: int | None = None):
    from pettingllms_cli.spec import load_spec

    overrides = list(overrides or [])
    if max_steps is not None:
        overrides.append(f"train.steps={max_steps}")
    if seed is not None:
        overrides.append(f"seed={seed}")
    return load_spec(spec_path, overrides)


def held_out_count(experiment) -> int:
    """Open env.data as `train` will (a missing or bad file is a UserError); returns the held-out count."""
    from pettingllms_cli.envs.loading import load_split

    env = experiment.env
    load_split(env.name, env.data, "train", experiment.seed, 1, env.options)  # one is enough to read the file
    return len(load_split(env.name, env.data, "test", experiment.seed, env.eval_problems, env.options))


def check_ready(experiment) -> None:
    from pettingllms_cli.models.loader import check_models  # imported here: torch loads only for commands that need it

    check_models(experiment.models)
    if getattr(experiment, "sampler", "hf") == "vllm":  # before any weight loads: one line, exit 2
        from pettingllms_cli.policy.vllm_sampler import sampler_problem

        problem = sampler_problem(experiment)
        if problem:
            raise UserError(problem)
    check_sandbox(experiment)


def check_sandbox(experiment) -> None:
    """An env that runs model code needs the kernel's sandbox, or `tools.sandbox: best_effort` (docs/sandbox.md)."""
    from pettingllms_cli.envs import ENVS
    from pettingllms_cli.tools.sandbox import require

    if ENVS[experiment.env.name].runs_model_code:
        require(experiment.tools.sandbox, warn=say)
