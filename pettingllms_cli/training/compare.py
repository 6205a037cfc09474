"""`pettingllms compare`: train several specs on the same budget and seeds, score them on the same
held-out problems, and write compare.md / compare.json / compare.html.

Arms may differ only in what defines a team, and their compute is levelled (`--budget`,
budget.py): the arm with the most roles trains first, and every other arm trains until it has spent
what that arm spent, seed by seed. Every arm and seed is scored greedily on one held-out set (or `--data FILE`), with
the role assignment its run learned; convergence is read from the held-out curve that
`train.eval_every` logs, never from training success (docs/metrics.md).

Runs live in `<out>/<spec name>/seed<k>`. A run whose spec.yaml equals the resolved spec and
that finished is reused (not retrained); an unfinished one is resumed; a stale one (spec
changed) is replaced. Held-out scores are cached per run in `compare_eval.json`, keyed by the
problems' content and the checkpoint, so a second call neither retrains nor re-scores.
"""

from __future__ import annotations

import hashlib
import math
import shlex
from collections.abc import Iterable
from pathlib import Path

from rich.console import Console

from pettingllms_cli import distributed
from pettingllms_cli.analysis.budget import (
    TOTAL_OF,
    budget_overrides,
    check_budget,
    check_equal_arms,
    describe_budget,
    reference_arm,
    roles_of,
)
from pettingllms_cli.analysis.render import console_table, ratios_table, verdict, write_outputs
from pettingllms_cli.analysis.stats import (
    censored_convergence,
    convergence_rates,
    convergence_step,
    factor_interval,
    mean_interval,
    paired_difference,
    wilson_interval,
)
from pettingllms_cli.envs import Problem
from pettingllms_cli.envs.loading import problems_fingerprint
from pettingllms_cli.errors import Stopped, UserError
from pettingllms_cli.jsonio import read_json, write_json
from pettingllms_cli.spec import Experiment, load_spec

CACHE_VERSION = "2"  # bump when what a cached score means changes (2: attempts over solved episodes, learned roles)


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


def train_eval(spec: Experiment, run_dir: Path, name: str, problems: list[Problem]) -> dict | None:
    """train's own eval_before/eval_after.json when train scored these very problems (same content) greedily."""
    from pettingllms_cli.analysis.evaluate import eval_problems

    scored = read_json(run_dir / name)  # None: missing, or damaged (scored again)
    if scored is None:
        return None
    own = eval_problems(spec, "test", spec.seed, spec.env.eval_problems)  # what train scored
    same = problems_fingerprint(own) == problems_fingerprint(problems)
    return scored if same and scored.get("decoding") == "greedy" else None


def score_run(spec: Experiment, run_dir: Path, problems: list[Problem]) -> dict:
    """Held-out scores of the untrained team and of the final checkpoint, cached in compare_eval.json."""
    from pettingllms_cli.analysis.evaluate import evaluate
    from pettingllms_cli.policy.adapters import Team
    from pettingllms_cli.rollout.roles import RoleAssigner
    from pettingllms_cli.training.checkpoint import latest_checkpoint, load_adapters, read_state

    checkpoint = latest_checkpoint(run_dir)
    key = problems_key(problems, checkpoint)
    cache = run_dir / "compare_eval.json"
    cached = distributed.on_main(read_cache, cache, key)  # every rank skips scoring, or none does (scoring is collective)
    if cached is not None:
        return cached
    initial = train_eval(spec, run_dir, "eval_before.json", problems)
    final = train_eval(spec, run_dir, "eval_after.json", problems)
    if initial is None or final is None:  # train scored other problems: score these, same greedy evaluate
        team, roles = Team(spec), RoleAssigner(spec)
        initial = initial or evaluate(team, spec, problems, n_transcripts=1, score_actions=False, assignment=roles.best())
        load_adapters(team, checkpoint)
        roles.load_state_dict(read_state(checkpoint).get("roles"))  # the assignment the run learned (rotate/adaptive)
        final = final or evaluate(team, spec, problems, n_transcripts=1, score_actions=False, assignment=roles.best())
    scored = {"key": key, "checkpoint": str(checkpoint), "initial": initial, "final": final}
    if distributed.is_main():
        write_json(cache, scored)
    return scored


def read_cache(cache: Path, key: str) -> dict | None:
    """The cached scores when they were computed on the same problems and checkpoint, else None."""
    cached = read_json(cache)  # None: missing, or cut short by a kill (score again)
    return cached if cached is not None and cached.get("key") == key else None


def run_summary(spec: Experiment, run_dir: Path, status: str, scored: dict, threshold: float, window: int) -> dict:
    """One row of the per-run table, from metrics.jsonl and the held-out scores.

    Convergence is the first step at which the held-out curve (`heldout_success_rate`, logged every
    `train.eval_every` steps) reaches `threshold` over `window` points, None when it never does (or there
    is no curve); `convergence_actions` / `convergence_tokens` are the run's totals up to that step.
    """
    from pettingllms_cli.analysis.report import read_metrics

    rows = read_metrics(run_dir)
    heldout = [(r["step"], r["heldout_success_rate"]) for r in rows if r.get("heldout_success_rate") is not None]
    steps, curve = [s for s, _ in heldout], [v for _, v in heldout]
    reached = convergence_step(steps, curve, threshold, window) if curve else None
    upto = [r for r in rows if reached is not None and r["step"] <= reached]
    return {
        "seed": spec.seed,
        "run_dir": str(run_dir),
        "status": status,
        "steps": len(rows),
        "group_size": spec.algorithm.group_size,
        "initial_success": scored["initial"]["team_success_rate"],
        "final_success": scored["final"]["team_success_rate"],
        "final_successes": scored["final"]["successes"],
        "episodes": scored["final"]["episodes"],
        "initial_attempts": scored["initial"]["mean_attempts_to_success"],
        "final_attempts": scored["final"]["mean_attempts_to_success"],  # over solved episodes only
        "convergence_step": reached,
        "convergence_actions": None if reached is None else spent(upto)["actions_total"],
        "convergence_tokens": None if reached is None else spent(upto)["tokens_total"],
        "heldout_curve": [[s, v] for s, v in heldout],
        **spent(rows),
    }


def spent(rows: list[dict]) -> dict:
    """A run's compute from its metrics.jsonl (docs/metrics.md): totals over every step, and means per step.

    Rows written before a count existed lack it: actions and wall time fall back to their parts, a count
    that has none (`effective_optimizer_steps`) is None.

    >>> s = spent([{"sampled_actions": 12, "seconds": 1.0}, {"sampled_actions": 36, "seconds": 2.0}])
    >>> s["sampled_actions"], s["sampled_actions_per_step"], s["actions_total"], s["effective_optimizer_steps"]
    (48, 24.0, 48, None)
    """
    actions = [sum(_num(r.get(k)) for k in ("sampled_actions", "playout_actions", "intent_actions")) for r in rows]
    training = [_num(r.get("training_seconds", r.get("seconds"))) for r in rows]
    measuring = [_num(r.get("on_policy_seconds")) + _num(r.get("heldout_seconds")) for r in rows]
    totals = {
        "sampled_actions": _total(rows, "sampled_actions", 0),  # candidates in training groups (K per group)
        "playout_actions": _total(rows, "playout_actions", 0),  # played on to score candidates; not trained
        "intent_actions": _total(rows, "intent_actions", 0),  # intents declared (coordination.protocol: intent)
        "actions_total": _total(rows, "actions_total", None) or sum(actions),
        "tokens_total": _total(rows, "tokens_generated", 0),  # every token sampled for training, play-outs and intents in
        "trained_tokens": _total(rows, "trained_tokens", 0),  # tokens whose loss had a gradient (docs/metrics.md)
        "optimizer_steps": _total(rows, "optimizer_steps", 0),
        "effective_optimizer_steps": _total(rows, "effective_optimizer_steps", None),  # updates that moved an adapter
        "wall_seconds_training": round(sum(training), 3),
        "wall_seconds_measurement": round(sum(measuring), 3),  # on-policy episodes (tree) and the held-out curve
    }
    totals["wall_seconds"] = round(totals["wall_seconds_training"] + totals["wall_seconds_measurement"], 3)
    for key in ("sampled_actions", "actions_total", "tokens_total"):  # means over ALL steps, not the first
        totals[f"{key}_per_step"] = totals[key] / len(rows) if rows else None
    return totals


def _total(rows: list[dict], key: str, missing: int | None) -> int | float | None:
    """The sum of `key` over the rows; `missing` when a row lacks it (None: the total is unknown)."""
    if missing is None and any(key not in r for r in rows):
        return None
    return sum(_num(r.get(key)) for r in rows)


def _num(value: object) -> int | float:
    """A logged count or time; 0 for one that is missing or damaged (null, a string)."""
    return value if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) else 0


# --- aggregation over seeds ---------------------------------------------------------------------------
T_OVER_SEEDS, WILSON = "t over seeds", "wilson over episodes"


def interval_method(runs_by_spec: dict[str, list[dict]]) -> str:
    """One method for every arm's success interval: a t interval over seeds, unless some arm has one seed or seeds
    that all scored alike (a zero-width t interval would claim certainty its episodes lack), then Wilson for all.

    >>> interval_method({"a": [{"final_success": 0.5}, {"final_success": 0.75}], "b": [{"final_success": 0.5}] * 2})
    'wilson over episodes'
    """
    spread = all(len({r["final_success"] for r in runs}) > 1 for runs in runs_by_spec.values())
    return T_OVER_SEEDS if spread else WILSON


def success_interval(
    values: list[float], successes: int, episodes: int, method: str = T_OVER_SEEDS
) -> tuple[float, list[float], str]:
    """Mean over seeds with its 95% interval by `method` (interval_method): t over seeds, or Wilson over all episodes
    (also whenever t has no interval: one seed, or every seed alike).

    >>> success_interval([0.5], 2, 4)[2], success_interval([0.25, 0.75], 4, 8)[1]
    ('wilson over episodes', [0.0, 1.0])
    >>> [round(x, 4) for x in success_interval([0.0, 0.0], 0, 4)[1]]
    [0.0, 0.4899]
    """
    mean, half = mean_interval(values)
    if method == WILSON or not half:
        return mean, list(wilson_interval(successes, episodes)), WILSON
    return mean, [max(0.0, mean - half), min(1.0, mean + half)], T_OVER_SEEDS


CONVERGENCE_KEY = {"steps": "convergence_step", "actions": "convergence_actions", "tokens": "convergence_tokens"}


def convergence_unit(budget: str, runs_by_spec: dict[str, list[dict]]) -> str:
    """Steps when every run took as many, else the budget's unit (tokens under `--budget tokens`, else actions): a
    step of one arm is not a step of another.

    >>> convergence_unit("actions", {"a": [{"steps": 4}], "b": [{"steps": 8}]}), convergence_unit("tokens", {"a": [{"steps": 4}]})
    ('actions', 'steps')
    """
    lengths = {r["steps"] for runs in runs_by_spec.values() for r in runs}
    return "steps" if len(lengths) <= 1 else ("tokens" if budget == "tokens" else "actions")


def spec_row(spec: Experiment, path: Path, runs: list[dict], method: str = T_OVER_SEEDS, unit: str = "steps") -> dict:
    """The table row of one spec: means over its seeds; convergence counts every seed, never-converged ones as never."""
    final, final_ci, method = success_interval(
        [r["final_success"] for r in runs], sum(r["final_successes"] for r in runs), sum(r["episodes"] for r in runs), method
    )
    initial, initial_half = mean_interval([r["initial_success"] for r in runs])
    converged = censored_convergence([r[CONVERGENCE_KEY[unit]] for r in runs])
    attempts = [r["final_attempts"] for r in runs if r["final_attempts"] is not None]
    return {
        "spec": spec.name,
        "path": str(path),
        "layout": spec.env.layout,
        "roles": roles_of(spec),
        "agents": len(spec.agents),
        "seeds": len(runs),
        "group_size": runs[0]["group_size"],
        "initial_success": initial,
        "initial_success_half_width": initial_half,
        "final_success": final,
        "final_success_ci": final_ci,
        "ci_method": method,
        "mean_attempts": sum(attempts) / len(attempts) if attempts else None,  # over solved episodes, mean over seeds
        "convergence_unit": unit,
        "convergence": converged["cost"],  # 1 / mean rate: None when no seed converged
        "convergence_ci": converged["cost_ci"],  # an upper end of None: "never" is inside the interval
        "convergence_rate": converged["rate"],
        "converged_seeds": converged["converged_seeds"],
        "not_converged_seeds": converged["not_converged_seeds"],
        **{key: _mean(r[key] for r in runs) for key in SPENT},
    }


SPENT = (  # per-run totals (spent), averaged over seeds in the spec's row
    "sampled_actions",
    "playout_actions",
    "intent_actions",
    "actions_total",
    "tokens_total",
    "trained_tokens",
    "optimizer_steps",
    "effective_optimizer_steps",
    "wall_seconds",
    "wall_seconds_training",
    "wall_seconds_measurement",
    "sampled_actions_per_step",
    "actions_total_per_step",
    "tokens_total_per_step",
)


def _mean(values: Iterable[float | None]) -> float | None:
    """Mean over seeds; None when any seed lacks the figure (a run logged before it existed)."""
    values = list(values)
    return None if not values or any(v is None for v in values) else sum(values) / len(values)


def ratios(a: dict, b: dict, runs_a: list[dict] | None = None, runs_b: list[dict] | None = None, unit: str = "steps") -> dict:
    """B relative to A over paired seeds, each factor > 1 when B does better: success B/A, attempts A/B, convergence
    rate B/A (never-converged seeds count as rate 0), and the paired success difference B - A.

    Each factor's point and 95% interval come from one estimator (stats.factor_interval), so the point lies inside.

    >>> r = ratios({"spec": "a", "final_success": 0.2, "mean_attempts": 2.0, "convergence": 8.0},
    ...            {"spec": "b", "final_success": 0.5, "mean_attempts": 1.5, "convergence": 4.0})
    >>> round(r["improvement_factor"], 3), round(r["success_gain"], 3), round(r["attempts_factor"], 3), r["convergence_factor"]
    (2.5, 0.3, 1.333, 2.0)
    """
    runs_a, runs_b = runs_a or [a_row_as_run(a, unit)], runs_b or [a_row_as_run(b, unit)]
    n = min(len(runs_a), len(runs_b))
    runs_a, runs_b = runs_a[:n], runs_b[:n]
    key = CONVERGENCE_KEY[unit]
    success = factor_interval([r["final_success"] for r in runs_b], [r["final_success"] for r in runs_a])
    attempts = factor_interval([r["final_attempts"] for r in runs_a], [r["final_attempts"] for r in runs_b])
    rates = [convergence_rates([r[key] for r in runs]) for runs in (runs_a, runs_b)]
    convergence = factor_interval(rates[1], rates[0])
    difference = paired_difference([r["final_success"] for r in runs_a], [r["final_success"] for r in runs_b], (-1.0, 1.0))
    return {
        "pair": f"{b['spec']}/{a['spec']}",
        "improvement_factor": success["factor"],
        "improvement_factor_ci": success["ci"],
        "success_gain": difference["difference"],  # mean over paired seeds of B - A
        "success_gain_ci": difference["ci"],
        "seeds_to_separate": difference["seeds_to_separate"],  # at the observed spread of the paired differences
        "attempts_factor": attempts["factor"],
        "attempts_factor_ci": attempts["ci"],
        "convergence_unit": unit,
        "convergence_factor": convergence["factor"],
        "convergence_factor_ci": convergence["ci"],
    }


def a_row_as_run(row: dict, unit: str = "steps") -> dict:
    """A table row standing in for its single run (for ratios of rows without runs)."""
    return {
        "final_success": row["final_success"],
        "final_attempts": row["mean_attempts"],
        CONVERGENCE_KEY[unit]: row["convergence"],
    }


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
    budget: str = "actions",
    data: str | None = None,
    again: str | None = None,
) -> dict:
    """Train (or reuse) every spec x seed at levelled compute, score all on one held-out set, write the three files.

    `again` is the command that reruns this compare (printed when a signal stops it).
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
    result = {
        "env": base.env.name,
        "held_out": {
            "data": data or base.env.data,
            "split": "test",
            "seed": base.seed,
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
        "rows": rows,
        "ratios": [ratios(rows[0], row, runs_by_spec[rows[0]["spec"]], runs_by_spec[row["spec"]], unit) for row in rows[1:]],
        "runs": runs_by_spec,
    }
    result["verdict"] = verdict(result)
    write_outputs(out, result)
    return result


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


def held_out(base: Experiment, episodes: int | None, data: str | None) -> list[Problem]:
    """The problems every arm is scored on: the first spec's held-out split, or that of `--data FILE` (as `eval --data`)."""
    from pettingllms_cli.analysis.evaluate import eval_problems

    if data is not None:
        base = base.model_copy(update={"env": base.env.model_copy(update={"data": data})})
    return eval_problems(base, "test", base.seed, episodes or base.env.eval_problems)


__all__ = ["compare", "console_table", "ratios_table"]  # cli/compare.py prints the tables built here
