"""`models list/pull` and `envs list/check`: what is built in, and whether an env keeps its contract."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from pettingllms_cli.cli.common import console, envs_app, models_app, say
from pettingllms_cli.errors import UserError
from pettingllms_cli.spec.limits import MAX_PROBLEMS, MAX_SEED


@models_app.command("list")
def models_list() -> None:
    """List built-in models and whether they are ready offline."""
    from pettingllms_cli.models.loader import source_problem
    from pettingllms_cli.spec.builtin_models import BUILTINS, cache_root

    table = Table("name", "status", "description")
    for name, b in BUILTINS.items():
        cached = (cache_root() / name / "config.json").is_file()
        status = "cached" if cached else (source_problem(name) or "available (run `models pull`)")
        table.add_row(name, status, b.description)
    console.print(table)


@models_app.command("pull")
def models_pull(
    name: Annotated[str, typer.Argument(help="A built-in model alias, or a hub id (owner/name).")],
    revision: Annotated[
        str | None, typer.Option(help="For a hub id: the branch, tag or commit (default: its default branch).")
    ] = None,
) -> None:
    """Materialise a built-in model in the local cache (converted once), or download a hub id into the HF cache."""
    from pettingllms_cli.models.loader import pull

    say(f"{name}: {pull(name, revision)}")


@envs_app.command("list")
def envs_list() -> None:
    """List environments with their versions and role layouts."""
    from pettingllms_cli.envs import ENVS
    from pettingllms_cli.envs.registry import ENTRY_POINT_GROUP as ENVS_GROUP

    table = Table("name", "version", "layouts")
    for name, env in sorted(ENVS.items()):
        table.add_row(name, str(env.version), "; ".join(f"{k}: {', '.join(v)}" for k, v in env.layouts.items()))
    for name in ENVS.entry_point_names():  # installed packages' envs, loaded only when used
        table.add_row(name, "-", f"entry point {ENVS_GROUP}")
    console.print(table)


@envs_app.command("check")
def envs_check(
    name: Annotated[str, typer.Argument(help="Registered env name (see `pettingllms envs list`) or import path `module:Class`.")],
    data: Annotated[str, typer.Option(help="A data file in a format the env reads, or `generated`.")] = "generated",
    limit: Annotated[int, typer.Option(min=1, max=MAX_PROBLEMS, help="Problems per split (train and test) to replay.")] = 8,
    seed: Annotated[int, typer.Option(min=0, max=MAX_SEED, help="Seed for generated problems.")] = 0,
) -> None:
    """Check an env's contract and replay reference (must solve) and corrupted (must fail) solutions."""
    from pettingllms_cli.envs import ENVS, EnvError
    from pettingllms_cli.envs.checker import check_env

    try:
        env = ENVS.resolve(name)  # a built-in, an entry point or `module:Class`
    except EnvError as e:
        raise UserError(str(e)) from None
    report = check_env(env, data=data, limit=limit, seed=seed)
    for failure in report.failures:
        console.print(f"[red]FAIL[/red] {escape(failure)}", highlight=False, soft_wrap=True)
    of = f" of {report.available}" if report.available is not None else ""
    more = " (raise --limit to check more)" if report.available is not None and report.checked < report.available else ""
    console.print(f"{report.passed} passed, {report.failed} failed; {report.checked}{of} problems replayed{more}")
    if not report.ok:
        raise typer.Exit(1)
