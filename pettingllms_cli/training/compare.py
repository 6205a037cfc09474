"""`pettingllms compare`: train several specs on the same budget and seeds, score them on the same
held-out problems, and write compare.md / compare.json / compare.html.

Arms may differ only in what defines a team, and their compute is levelled (`--budget`,
budget.py): the arm with the most roles trains first, and every other arm trains until it has spent
what that arm spent, seed by seed. Every arm and seed is scored greedily on one held-out set (or `--data FILE`), with
the role assignment its run learned; convergence is read from the held-out curve that
`train.eval_every` logs, never from training success (docs/metrics.md).

This module checks the specs and assembles compare.json; compare_runs.py trains, reuses and scores the runs,
compare_summary.py turns them into rows and factors, and analysis/render.py writes the tables and the verdict.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from rich.console import Console

from pettingllms_cli.analysis.budget import Budget, check_budget, check_equal_arms, describe_budget
from pettingllms_cli.analysis.render import console_table, ratios_table, verdict, write_outputs
from pettingllms_cli.envs import Problem
from pettingllms_cli.envs.loading import HELD_OUT_SEED, problems_fingerprint
from pettingllms_cli.errors import UserError
from pettingllms_cli.spec import Experiment, load_spec
from pettingllms_cli.training.compare_runs import run_state, score_run, score_votes, seeded, train_arms
from pettingllms_cli.training.compare_summary import (
    convergence_unit,
    interval_method,
    ratios,
    run_summary,
    spec_row,
    spent,
    success_interval,
    untrained_row,
    vote_rows,
)


# --- the specs ------------------------------------------------------------------------------------
def load_arms(paths: list[Path], max_steps: int | None) -> list[Experiment]:
    overrides = [f"train.steps={max_steps}"] if max_steps is not None else []
    return [load_spec(p, overrides) for p in paths]


def check_comparable(paths: list[Path], specs: list[Experiment], allow_unequal: bool) -> None:
    """Refuse comparisons that would not mean anything; every message says how to fix it."""
    if len(specs) < 2:
        raise UserError("compare needs at least two specs (e.g. a single-agent and a multi-agent one)")
    envs = {s.env.name for s in specs}
    if len(envs) > 1:
        listed = ", ".join(f"{p} ({s.env.name})" for p, s in zip(paths, specs, strict=True))
        raise UserError(f"specs are for different envs: {listed}; compare specs of one env")
    names = [s.name for s in specs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise UserError(f"two specs are both named {dupes[0]!r}; give each spec a distinct `name` (it names its run folders)")
    if not allow_unequal:
        check_equal_arms(paths, specs)


# --- the command -----------------------------------------------------------------------------------------
def compare(
    paths: list[Path],
    seeds: int = 3,
    max_steps: int | None = None,
    out: Path = Path("runs/compare"),
    allow_unequal: bool = False,
    episodes: int | None = None,
    threshold: float = 0.5,
    window: int = 3,
    console: Console | None = None,
    budget: Budget = "actions",
    data: str | None = None,
    again: str | None = None,
    vote: bool = True,
) -> dict:
    """Train (or reuse) every spec x seed at levelled compute, score all on one held-out set, write the three files.

    `again` is the command that reruns this compare (printed when a signal stops it). Besides a row per arm, the rows
    hold each arm untrained (step 0 of its own runs) and, with `vote`, each lone arm at the team's evaluation compute
    (majority of K samples, and best of K by the answer key, labelled as an oracle).
    """
    console = console or Console()
    if seeds < 1:
        raise UserError(f"--seeds {seeds}: need at least one seed")
    specs = load_arms(paths, max_steps)
    check_comparable(paths, specs, allow_unequal)
    check_budget(budget)
    if any(s.train.eval_every is None for s in specs):
        console.print("no held-out curve (train.eval_every unset): convergence will not be measured; set train.eval_every")
    base = specs[0]
    problems = held_out(base, episodes, data)
    again = again or shlex.join(["pettingllms", "compare", *map(str, paths), "--seeds", str(seeds), "--out", str(out)])
    runs_by_spec, levelling = train_arms(paths, specs, budget, seeds, max_steps, out, problems, threshold, window, console, again)
    method, unit = interval_method(runs_by_spec), convergence_unit(budget, runs_by_spec)  # one of each for every arm
    rows = [spec_row(spec, path, runs_by_spec[spec.name], method, unit) for path, spec in zip(paths, specs, strict=True)]
    baselines = [untrained_row(row, runs_by_spec[row["spec"]], method) for row in rows]
    if vote:
        baselines += lone_at_team_compute(paths, specs, rows, runs_by_spec, levelling, max_steps, problems, method, console)
    result = {
        "env": base.env.name,
        "held_out": {
            "data": data or base.env.data,
            "split": "test",
            "seed": HELD_OUT_SEED,  # one fixed held-out set, whatever the runs' seeds
            "problems": [{"id": p.id, "question": p.question, "answer": p.answer} for p in problems],
            "fingerprint": problems_fingerprint(problems),
            "decoding": "greedy",
        },
        "budget": {
            "mode": budget,
            "how": describe_budget(budget, levelling["reference"]),
            **levelling,  # the reference arm, each seed's budget and each run's overrides
            "sampled_actions_per_step": {row["spec"]: row["sampled_actions_per_step"] for row in rows},  # means, all steps
            "actions_total": {row["spec"]: row["actions_total"] for row in rows},  # per seed, play-outs and intents in
            "tokens_total": {row["spec"]: row["tokens_total"] for row in rows},
        },
        "seeds": list(range(seeds)),
        "convergence": {
            "metric": "heldout_success_rate (greedy, every train.eval_every steps)",
            "threshold": threshold,
            "window": window,
            "unit": unit,
            "estimator": "1 / mean over seeds of 1/(cost to threshold), a never-converged seed counting 1/cost = 0",
        },
        "rows": rows + baselines,  # the trained arms (kind "arm"), then what is scored from their runs (derived_row)
        "ratios": [ratios(rows[0], row, runs_by_spec[rows[0]["spec"]], runs_by_spec[row["spec"]], unit) for row in rows[1:]],
        "runs": runs_by_spec,
    }
    result["verdict"] = verdict(result)
    write_outputs(out, result)
    return result


def lone_at_team_compute(
    paths: list[Path],
    specs: list[Experiment],
    rows: list[dict],
    runs_by_spec: dict[str, list[dict]],
    levelling: dict,
    max_steps: int | None,
    problems: list[Problem],
    method: str,
    console: Console,
) -> list[dict]:
    """Each one-role arm's final checkpoints sampled K times a problem, K matched to the evaluation compute of the arm
    with the most roles (vote.matched_k), so a sampling budget at evaluation cannot explain a team's lead."""
    from pettingllms_cli.analysis.budget import reference_arm, roles_of
    from pettingllms_cli.analysis.vote import matched_k

    ref = reference_arm(specs)
    if roles_of(specs[ref]) < 2:
        return []
    team_runs = [r for r in runs_by_spec[specs[ref].name] if r.get("eval_per_problem")]
    if not team_runs:
        return []
    out = []
    for path, spec, row in zip(paths, specs, rows, strict=True):
        runs = runs_by_spec[spec.name]
        if roles_of(spec) > 1 or not runs or not all(r.get("eval_per_problem") for r in runs):
            continue
        matched = matched_k(_mean_per_problem(team_runs), _mean_per_problem(runs))
        console.print(f"scoring {spec.name} at the team's evaluation compute: {matched['how']}", markup=False, highlight=False)
        votes = []
        for run in runs:
            overrides = levelling["overrides"][spec.name].get(run["seed"], [])
            spec_of_run = seeded(path, run["seed"], max_steps, overrides)
            votes.append(score_votes(spec_of_run, Path(run["run_dir"]), problems, matched["k"]))
        out += vote_rows(row, votes, method, matched)
    return out


def _mean_per_problem(runs: list[dict]) -> tuple[float, float]:
    """Sampled actions and tokens per problem of the runs' greedy final evaluations, averaged over seeds."""
    pairs = [r["eval_per_problem"] for r in runs]
    return sum(a for a, _ in pairs) / len(pairs), sum(t for _, t in pairs) / len(pairs)


def held_out(base: Experiment, episodes: int | None, data: str | None) -> list[Problem]:
    """The problems every arm is scored on: the first spec's held-out split, or that of `--data FILE` (as `eval --data`)."""
    from pettingllms_cli.analysis.evaluate import eval_problems

    if data is not None:
        base = base.model_copy(update={"env": base.env.model_copy(update={"data": data})})
    return eval_problems(base, "test", HELD_OUT_SEED, episodes or base.env.eval_problems)


__all__ = [  # cli/compare.py, the Python API and tests reach compare's parts through this module
    "compare",
    "console_table",
    "convergence_unit",
    "interval_method",
    "ratios",
    "ratios_table",
    "run_state",
    "run_summary",
    "score_run",
    "seeded",
    "spent",
    "success_interval",
]
