"""`compare`: specs trained for N seeds at equal compute, scored on the same held-out problems."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from pettingllms_cli import distributed
from pettingllms_cli.analysis.budget import Budget
from pettingllms_cli.cli.common import app, check_ready, console, out_path, say
from pettingllms_cli.spec.limits import MAX_PROBLEMS, MAX_SEEDS, MAX_STEPS


@app.command()
def compare(
    specs: Annotated[
        list[Path], typer.Argument(help="Two or more experiment YAML files; the first is baseline A of the ratios.")
    ],
    seeds: Annotated[int, typer.Option(min=1, max=MAX_SEEDS, help="Seeds per spec (0..N-1); each spec x seed is one run.")] = 3,
    max_steps: Annotated[int | None, typer.Option(min=1, max=MAX_STEPS, help="Override train.steps for every spec.")] = None,
    out: Annotated[str, typer.Option(help="Folder for the runs (<out>/<name>/seed<k>) and compare.md/json/html.")] = (
        "runs/compare"
    ),
    allow_unequal: Annotated[
        bool,
        typer.Option(
            help="Compare specs that differ in more than what defines a team (layout, agents and roles, specialization, "
            "assignment, distill, coordination, credit: reward.credit, team_signal, balance_verdicts), e.g. in algorithm.lr "
            "or models."
        ),
    ] = False,
    episodes: Annotated[
        int | None, typer.Option(min=1, max=MAX_PROBLEMS, help="Held-out problems (default: the first spec's eval_problems).")
    ] = None,
    threshold: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Held-out success (train.eval_every curve) that counts as converged.")
    ] = 0.5,
    window: Annotated[int, typer.Option(min=1, help="Held-out points averaged before checking the threshold.")] = 3,
    budget: Annotated[
        Budget,
        typer.Option(
            help="What is held equal: `actions` (actions_total: sampled, play-outs and intents) or `tokens` "
            "(tokens_total). The budget of each seed is what the arm with the most roles (the first on a tie) spends in "
            "train.steps steps; every other arm trains until its running total reaches it, so totals agree within one "
            "step. `steps`: nothing levelled."
        ),
    ] = "actions",
    data: Annotated[
        str | None, typer.Option(help="Score every arm on this data file's held-out problems (as `eval --data`).")
    ] = None,
    vote: Annotated[
        bool,
        typer.Option(
            help="Also score each one-role arm at the team's evaluation compute: K sampled episodes a problem, combined "
            "by majority vote and (labelled oracle) by any-of-K, K matched to the team's actions and tokens a problem."
        ),
    ] = True,
) -> None:
    """Train each spec for N seeds at equal compute, score all on the same held-out problems, write the verdict and tables."""
    from pettingllms_cli.spec import load_spec
    from pettingllms_cli.training.compare import compare as run_compare
    from pettingllms_cli.training.tracking import check_trackers

    out = out_path(out)
    for path in specs:
        arm = load_spec(path)
        check_ready(arm)
        check_trackers(arm.train.report_to)  # a missing wandb/trackio: one line before the first arm trains
    again = shlex.join([*distributed.relaunch(), *sys.argv[1:]])  # the rerun that continues a stopped compare
    result = run_compare(
        specs,
        seeds,
        max_steps,
        out,
        allow_unequal,
        episodes,
        threshold,
        window,
        console=console,
        budget=budget,
        data=data,
        again=again,
        vote=vote,
    )
    print_result(result)
    say(f"wrote {out / 'compare.md'}, {out / 'compare.json'}, {out / 'compare.html'}")


LOG_WIDTH = 10_000  # wider than any table: in a log, rich cuts or folds nothing


def print_result(result: dict) -> None:
    """The verdict, the spec rows and the factors. In a terminal the tables fit its width; in a log (nohup, CI) they
    keep their natural width, since rich would otherwise narrow them to 80 columns and fold spec names."""
    from pettingllms_cli.training.compare import console_table, ratios_table

    say(result["verdict"])
    tables = console if console.is_terminal else Console(file=console.file, width=LOG_WIDTH, highlight=False)
    tables.print(console_table(result))
    tables.print(ratios_table(result))
