"""`compare`'s runs: train each arm and seed (or reuse a finished run), score it on the held-out problems, and
level every arm's compute to the reference arm's (budget.py), seed by seed.

Runs live in `<out>/<spec name>/seed<k>`. A run whose spec.yaml equals the resolved spec and that finished is reused
(not retrained); an unfinished one is resumed; a stale one (spec changed) is replaced. Held-out scores are cached per
run in `compare_eval.json`, keyed by the problems' content and the checkpoint, so a second call neither retrains nor
re-scores.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from pettingllms_cli import distributed
from pettingllms_cli.analysis.budget import TOTAL_OF, budget_overrides, reference_arm
from pettingllms_cli.envs import Problem
from pettingllms_cli.envs.loading import problems_fingerprint
from pettingllms_cli.errors import Stopped, UserError
from pettingllms_cli.jsonio import read_json, write_json
from pettingllms_cli.spec import Experiment, load_spec
from pettingllms_cli.training.compare_summary import run_summary, spent

if TYPE_CHECKING:
    from pettingllms_cli.policy.adapters import Team
    from pettingllms_cli.rollout.roles import Assignment
    from pettingllms_cli.training.trained import Trained

CACHE_VERSION = "2"  # bump when what a cached score means changes (2: attempts over solved episodes, learned roles)


# --- every arm and seed in turn ---------------------------------------------------------------------
def train_arms(
    paths: list[Path],
    specs: list[Experiment],
    budget: str,
    seeds: int,
    max_steps: int | None,
    out: Path,
    problems: list[Problem],
    threshold: float,
    window: int,
    console: Console,
    again: str,
) -> tuple[dict[str, list[dict]], dict]:
    """Train (or reuse) and score every spec x seed in turn: {spec name: one summary per finished seed}, and how they
    were levelled (budget.py): the reference arm's seeds first, since what each spent is the others' budget.

    The first SIGINT/SIGTERM in a training step finishes that step, checkpoints it and raises Stopped (exit 130)
    naming the runs still missing; elsewhere (loading, scoring) it stops at once. A stopped seed is never summarised,
    and the rerun resumes it. A second signal aborts at once, as in `train`.
    """
    from pettingllms_cli.training.graceful import GracefulStop, StopNow
    from pettingllms_cli.training.lock import writer_lock

    ref = reference_arm(specs)
    others = [i for i in range(len(specs)) if i != ref]
    order = list(range(len(specs))) if budget == "steps" else [ref, *others]  # the reference arm's totals are the budget
    plan = [(i, seed) for i in order for seed in range(seeds)]
    names = [f"{specs[i].name} seed{seed}" for i, seed in plan]
    runs_by_spec: dict[str, list[dict]] = {spec.name: [] for spec in specs}
    levelling = {"reference": specs[ref].name, "per_seed": {}, "overrides": {spec.name: {} for spec in specs}}
    with GracefulStop() as stop:
        stop.at_once()  # outside train's own steps there is no step to finish
        for n, (i, seed) in enumerate(plan):
            path, spec, run_dir = paths[i], specs[i], out / specs[i].name / f"seed{seed}"
            extra = [] if i == ref else budget_overrides(spec, budget, levelling["per_seed"].get(seed, 0))
            try:
                run_spec = seeded(path, seed, max_steps, extra)
                with writer_lock(run_dir, "then rerun this compare (finished runs are reused)"):  # one writer per run
                    status = ensure_run(run_spec, run_dir, console, again)
                    scored = score_run(run_spec, run_dir, problems) if status != "stopped" else {}
            except StopNow as e:
                raise Stopped(stopped_message(names[n:], e.signal_name, again)) from None
            if status == "stopped":  # train finished its step, checkpointed and returned
                raise Stopped(stopped_message(names[n:], f"{names[n]} checkpointed", again))
            summary = run_summary(run_spec, run_dir, status, scored, threshold, window)
            if budget != "steps" and i == ref:
                levelling["per_seed"][seed] = int(summary[TOTAL_OF[budget]])
            elif budget != "steps":
                check_levelled(budget, summary, levelling["per_seed"][seed], specs[ref], names[n])
            levelling["overrides"][spec.name][seed] = extra
            runs_by_spec[spec.name].append(summary)
    return runs_by_spec, levelling


def check_levelled(budget: str, run: dict, target: int, reference: Experiment, name: str) -> None:
    """The run spent its budget to within one of its steps; a budget below one step of it cannot be met (exit 2)."""
    from pettingllms_cli.analysis.report import read_metrics

    key = TOTAL_OF[budget]
    steps = [spent([row])[key] for row in read_metrics(Path(run["run_dir"]))]
    if steps and steps[0] > target:
        raise UserError(
            f"--budget {budget}: {name} spends {steps[0]} {budget} in one step, more than the budget of {target} "
            f"({reference.name} in {reference.train.steps} steps); the smallest budget that works is {steps[0]}: raise "
            f"--max-steps (or {reference.name}'s train.steps) until {reference.name} spends at least that, or use --budget steps"
        )
    if not steps or not 0 <= run[key] - target < steps[-1]:
        raise UserError(
            f"--budget {budget}: {name} spent {run[key]} {budget} where the budget is {target} (within one step: "
            f"{steps[-1] if steps else 0}); it stopped at its train.steps bound: rerun this compare with a larger --max-steps"
        )


def stopped_message(missing: list[str], why: str, again: str) -> str:
    """What a stopped compare kept, what it lacks and how to go on; no report is written, so none averages a partial seed."""
    return (
        f"compare stopped ({why}): finished runs are kept and will be reused; missing: {', '.join(missing)}; "
        f"no compare report was written (it would average unfinished seeds); continue with: {again}"
    )


def seeded(path: Path, seed: int, max_steps: int | None, budget: list[str] | tuple = ()) -> Experiment:
    """The arm's spec for one seed, with --max-steps and the budget's levelling overrides applied."""
    overrides = [f"seed={seed}"] + ([f"train.steps={max_steps}"] if max_steps is not None else []) + list(budget)
    return load_spec(path, overrides)


# --- one run: train or reuse, then score ------------------------------------------------------------
def run_state(spec: Experiment, run_dir: Path) -> str:
    """`done` (reuse), `partial` (resume), `stale` (replace), `new`, or `foreign`: not a run, never replaced."""
    from pettingllms_cli.training.rundir import not_a_run

    state = _run_state(spec, run_dir)
    return "foreign" if state == "stale" and not_a_run(run_dir) else state


def _run_state(spec: Experiment, run_dir: Path) -> str:
    from pettingllms_cli.training.checkpoint import complete_checkpoints
    from pettingllms_cli.training.rundir import as_current, holds_run, read_saved_spec

    spec_file = run_dir / "spec.yaml"
    if not spec_file.is_file():
        return "stale" if holds_run(run_dir) else "new"
    try:
        saved = read_saved_spec(spec_file)
    except UserError:
        return "stale"  # damaged: replace the run
    if as_current(saved) != spec.model_dump(mode="json"):
        return "stale"  # a knob added since the run, at its default, is no change (as_current)
    steps = [s for s, _ in complete_checkpoints(run_dir)]
    ended = bool(steps) and (spec.train.steps in steps or spent_its_budget(spec, run_dir, max(steps)))
    finished = ended and (run_dir / "eval_after.json").is_file()
    return "done" if finished else ("partial" if steps else "stale")


def spent_its_budget(spec: Experiment, run_dir: Path, step: int) -> bool:
    """Had the run spent its `train.stop_at_*` budget by `step` (its newest checkpoint)? `train.steps` is then only a bound."""
    from pettingllms_cli.training.loop import spent_so_far
    from pettingllms_cli.training.metrics import budget_reached

    return budget_reached(spec, spent_so_far(run_dir, step))


def ensure_run(spec: Experiment, run_dir: Path, console: Console, again: str | None = None) -> str:
    """Train the run unless a finished one with this exact spec exists; returns what happened (`stopped`: a signal
    stopped training after a checkpoint). `again` is the command that continues, printed by a stopped `train`."""
    from pettingllms_cli.training.loop import train
    from pettingllms_cli.training.rundir import not_a_run

    state = distributed.on_main(run_state, spec, run_dir)  # one decision for all ranks: rank 0 may be writing run_dir
    if state == "done":
        console.print(f"reusing {run_dir} (same spec and seed, finished)", markup=False, highlight=False)
        return "reused"
    if state == "foreign":
        raise UserError(f"{not_a_run(run_dir)}; compare replaces only its own runs: move those files out or choose another --out")
    console.print(
        f"{'resuming' if state == 'partial' else 'training'} {run_dir}"
        + (" (spec changed)" if state == "stale" and run_dir.exists() else ""),
        markup=False,
        highlight=False,
    )
    train(spec, run_dir, resume=state == "partial", overwrite=state == "stale", console=console, resume_command=again)
    if distributed.on_main(run_state, spec, run_dir) != "done":
        return "stopped"
    return "resumed" if state == "partial" else "trained"


def problems_key(problems: list[Problem], checkpoint: Path) -> str:
    """Identifies what a cached score was computed on: the problems and the checkpoint scored."""
    text = CACHE_VERSION + problems_fingerprint(problems) + str(checkpoint.name)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def train_eval(run_dir: Path, name: str, problems: list[Problem]) -> dict | None:
    """train's own eval_before/eval_after.json when it scored these very problems (the same ids and questions, in
    order, read from the file itself: a run trained when held-out sets followed the run's seed scored others) greedily."""
    scored = read_json(run_dir / name)  # None: missing, or damaged (scored again)
    if scored is None or scored.get("decoding") != "greedy":
        return None
    episodes = scored.get("per_episode") or []
    same = [(e.get("id"), e.get("question")) for e in episodes] == [(p.id, p.question) for p in problems]
    return scored if same else None


def score_run(spec: Experiment, run_dir: Path, problems: list[Problem]) -> dict:
    """Held-out scores of the untrained team and of the final checkpoint, cached in compare_eval.json."""
    from pettingllms_cli.analysis.rollout_settings import role_assigner
    from pettingllms_cli.policy.adapters import Team

    found = final_checkpoint(spec, run_dir)
    key = problems_key(problems, found.checkpoint)
    cache = run_dir / "compare_eval.json"
    cached = distributed.on_main(read_cache, cache, key)  # every rank skips scoring, or none does (scoring is collective)
    if cached is not None:
        return cached
    initial = train_eval(run_dir, "eval_before.json", problems)  # when train scored other problems, score these
    initial = initial or greedy(Team(spec), spec, problems, role_assigner(spec).best())
    final = train_eval(run_dir, "eval_after.json", problems) or greedy(found.team(), spec, problems, found.assignment())
    scored = {"key": key, "checkpoint": str(found.checkpoint), "initial": initial, "final": final}
    if distributed.is_main():
        write_json(cache, scored)
    return scored


def final_checkpoint(spec: Experiment, run_dir: Path) -> Trained:
    """The run's newest complete checkpoint, with the role assignment it learned, as compare scores it."""
    from pettingllms_cli.training.checkpoint import latest_checkpoint
    from pettingllms_cli.training.trained import Trained

    return Trained(spec, latest_checkpoint(run_dir), None, run_dir)


def greedy(team: Team, spec: Experiment, problems: list[Problem], assignment: Assignment) -> dict:
    """One greedy episode a problem, as train's own held-out scores are made."""
    from pettingllms_cli.analysis.evaluate import evaluate

    return evaluate(team, spec, problems, n_transcripts=1, score_actions=False, assignment=assignment)


def read_cache(cache: Path, key: str) -> dict | None:
    """The cached scores when they were computed on the same problems and checkpoint, else None."""
    cached = read_json(cache)  # None: missing, or cut short by a kill (score again)
    return cached if cached is not None and cached.get("key") == key else None


# --- the lone agent at the team's evaluation compute (analysis/vote.py) -------------------------------------------
def score_votes(spec: Experiment, run_dir: Path, problems: list[Problem], k: int) -> dict:
    """The final checkpoint's K episodes per problem, sampled at `train.temperature` (seeds 0..K-1), combined by
    majority vote and by any-of-K (vote.combine); cached in compare_vote.json by problems, checkpoint and K."""
    from pettingllms_cli.analysis.evaluate import evaluate
    from pettingllms_cli.analysis.vote import combine

    found = final_checkpoint(spec, run_dir)
    temperature = spec.train.temperature
    key = problems_key(problems, found.checkpoint) + f"-k{k}-t{temperature}"
    cache = run_dir / "compare_vote.json"
    cached = distributed.on_main(read_cache, cache, key)
    if cached is not None:
        return cached
    team, roles = found.team(), found.assignment()
    runs = [
        evaluate(team, spec, problems, temperature=temperature, seed=i, n_transcripts=0, score_actions=False, assignment=roles)
        for i in range(k)
    ]
    scored = {
        "key": key,
        "checkpoint": str(found.checkpoint),
        "temperature": temperature,
        "tokens_generated": sum(r["tokens_generated"] for r in runs),
        **combine([r["per_episode"] for r in runs]),
    }
    if distributed.is_main():
        write_json(cache, scored)
    return scored
