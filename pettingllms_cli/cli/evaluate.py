"""`eval` and `report`: score a run on held-out problems, and (re)write its report."""

from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from pettingllms_cli import distributed
from pettingllms_cli.cli.common import app, check_ready, console, out_path, say
from pettingllms_cli.errors import UserError
from pettingllms_cli.jsonio import write_json
from pettingllms_cli.spec.limits import MAX_PROBLEMS, MAX_SEED


@app.command("eval")
def eval_(
    target: Annotated[
        Path,
        typer.Argument(help="A run directory (its newest checkpoint), a checkpoints/step_N folder, or a spec (untrained base)."),
    ],
    data: Annotated[
        str | None, typer.Option(help="Problems from this data file (any format the env reads), not env.data.")
    ] = None,
    split: Annotated[str, typer.Option(help="`test` (held-out) or `train`.")] = "test",
    episodes: Annotated[
        int | None,
        typer.Option(min=1, max=MAX_PROBLEMS, help="Problems to score, one episode each (default: env.eval_problems)."),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(
            min=0,
            max=MAX_SEED,
            help="Seed for generated problems and sampling (default: 0, the one held-out set train and compare score).",
        ),
    ] = None,
    temperature: Annotated[
        float | None, typer.Option(help="Sample at this temperature (> 0) instead of greedy decoding.")
    ] = None,
    out: Annotated[
        str | None, typer.Option(help="Write the full result (per-episode outcomes, transcripts) to this JSON file.")
    ] = None,
) -> None:
    """Score a run, a checkpoint or an untrained spec on held-out problems."""
    from pettingllms_cli.training.eval_target import resolve_target, run_eval

    out = out_path(out)
    if temperature is not None and not (math.isfinite(temperature) and temperature > 0):
        raise UserError(f"--temperature {temperature}: must be a finite number > 0; omit it for greedy decoding")
    check_ready(resolve_target(target).spec)
    from pettingllms_cli.training.lock import writer_lock
    from pettingllms_cli.training.rundir import run_dir_of

    into_run = run_dir_of(out) if out is not None else None  # --out inside a run directory: one writer at a time
    with writer_lock(into_run, "then run this eval again") if into_run else contextlib.nullcontext():
        result = run_eval(target, data=data, split=split, episodes=episodes, seed=seed, temperature=temperature)
        console.print(_eval_table(result))
        if out is not None and distributed.is_main():
            write_json(out, result, then="choose another --out")
            say(f"wrote {out}")


def _eval_table(result: dict) -> Table:
    ci = result["team_success_ci"]
    what = f"{result['spec']} ({result['kind']}, step {result['step']})"
    table = Table("metric", "value", title=f"{what}: {result['episodes']} {result['split']} episodes, {result['decoding']}")
    table.add_row("team success rate", f"{result['team_success_rate']:.3f}  [95% CI {ci[0]:.3f}, {ci[1]:.3f}]")
    attempts = result["mean_attempts_to_success"]  # over solved episodes; None when none was solved
    table.add_row("mean attempts to success (solved)", "none solved" if attempts is None else f"{attempts:.2f}")
    table.add_row("mean turns", f"{result['mean_turns']:.2f}")
    for key in sorted(k for k in result if k.startswith(("reward/", "action_logprob/", "tool_call_validity/"))):
        table.add_row(key, f"{result[key]:.3f}")
    table.add_row("tokens generated", str(result["tokens_generated"]))
    table.add_row("seconds", f"{result['seconds']:.1f}")
    return table


@app.command()
def report(run_dir: Annotated[Path, typer.Argument(help="A run directory written by `pettingllms train`.")]) -> None:
    """(Re)write a run's report.md and self-contained report.html with plots."""
    from pettingllms_cli.analysis.report import write_report
    from pettingllms_cli.training.lock import writer_lock

    if not run_dir.is_dir() or not ((run_dir / "metrics.jsonl").is_file() or (run_dir / "spec.yaml").is_file()):
        raise UserError(f"{run_dir}: not a run directory (no metrics.jsonl or spec.yaml); pass the --out folder of `train`")
    with writer_lock(run_dir, "then run `pettingllms report` again once it ends (train writes the report itself)"):
        md = write_report(run_dir)
    say(f"wrote {md} and {run_dir / 'report.html'}")
