"""The `pettingllms` command line. User mistakes end as one line on stderr and exit code 2."""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from pettingllms_cli.errors import UserError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Train teams of LLM agents with multi-agent RL (AT-GRPO).")
models_app = typer.Typer(no_args_is_help=True, help="Built-in offline models.")
envs_app = typer.Typer(no_args_is_help=True, help="Registered environments.")
app.add_typer(models_app, name="models")
app.add_typer(envs_app, name="envs")
console = Console()

SetOpt = Annotated[list[str] | None, typer.Option("--set", help="Override a spec field: dotted.key=value (repeatable).")]


def _load(spec_path: Path, overrides: list[str] | None, max_steps: int | None = None, seed: int | None = None):
    from pettingllms_cli.spec import load_spec

    overrides = list(overrides or [])
    if max_steps is not None:
        overrides.append(f"train.steps={max_steps}")
    if seed is not None:
        overrides.append(f"seed={seed}")
    return load_spec(spec_path, overrides)


@app.command()
def train(
    spec: Annotated[Path, typer.Argument(help="Experiment YAML file.")],
    out: Annotated[Path | None, typer.Option(help="Run directory (default: output_dir or runs/<name>).")] = None,
    set_: SetOpt = None,
    max_steps: Annotated[int | None, typer.Option(help="Override train.steps.")] = None,
    seed: Annotated[int | None, typer.Option(help="Override the seed.")] = None,
    resume: Annotated[bool, typer.Option(help="Continue from the newest complete checkpoint in the run directory.")] = False,
    overwrite: Annotated[bool, typer.Option(help="Replace an existing run directory.")] = False,
) -> None:
    """Train the experiment's agents together and write a run directory."""
    from pettingllms_cli.train import train as run_training

    experiment = _load(spec, set_, max_steps, seed)
    _check_models(experiment)
    run_training(experiment, out or experiment.run_dir, resume=resume, overwrite=overwrite, console=console)


@app.command()
def validate(spec: Annotated[Path, typer.Argument(help="Experiment YAML file.")], set_: SetOpt = None) -> None:
    """Check a spec (names, roles, models, budgets) without loading any weights."""
    experiment = _load(spec, set_)
    _check_models(experiment)
    roles = ", ".join(f"{a}: {'/'.join(s.roles)}" for a, s in experiment.agents.items())
    console.print(f"{spec}: ok ({experiment.env.name}, {len(experiment.agents)} agent(s): {roles})")


def _check_models(experiment) -> None:
    from pettingllms_cli.models.loader import source_problem

    for name, model in experiment.models.items():
        problem = source_problem(model.source)
        if problem:
            raise UserError(f"models.{name}.source: {problem}")


@app.command()
def schema() -> None:
    """Print the experiment spec's JSON schema."""
    from pettingllms_cli.spec import Experiment

    print(json.dumps(Experiment.model_json_schema(), indent=2))


@models_app.command("list")
def models_list() -> None:
    """List built-in models and whether they are ready offline."""
    from pettingllms_cli.models.loader import BUILTINS, cache_root, source_problem

    table = Table("name", "status", "description")
    for name, b in BUILTINS.items():
        cached = (cache_root() / name / "config.json").is_file()
        status = "cached" if cached else (source_problem(name) or "available (run `models pull`)")
        table.add_row(name, status, b.description)
    console.print(table)


@models_app.command("pull")
def models_pull(name: Annotated[str, typer.Argument(help="Built-in model alias.")]) -> None:
    """Materialise a built-in model in the local cache (converted once, then loads in a second)."""
    from pettingllms_cli.models.loader import pull

    console.print(f"{name}: {pull(name)}")


@envs_app.command("list")
def envs_list() -> None:
    """List environments with their versions and role layouts."""
    from pettingllms_cli.envs import ENVS

    table = Table("name", "version", "layouts")
    for name, env in sorted(ENVS.items()):
        table.add_row(name, str(env.version), "; ".join(f"{k}: {', '.join(v)}" for k, v in env.layouts.items()))
    console.print(table)


def main() -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    warnings.filterwarnings("ignore", category=FutureWarning)  # library deprecation notes are not for users
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    try:
        app(standalone_mode=False)
    except UserError as e:
        Console(stderr=True).print(f"[red]error:[/red] {e}", highlight=False, soft_wrap=True)
        sys.exit(e.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        Console(stderr=True).print("aborted")
        sys.exit(130)
    except Exception as e:  # click usage errors carry their own exit code
        import click

        if isinstance(e, click.exceptions.ClickException):
            e.show()
            sys.exit(e.exit_code)
        if isinstance(e, click.exceptions.Exit):
            sys.exit(e.exit_code)
        raise
