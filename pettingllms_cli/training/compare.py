"""`pettingllms compare`: train several specs on the same budget and seeds, score them on the same
held-out problems, and write compare.md / compare.json / compare.html.

Arms may differ only in what defines a team, and their compute is levelled (`--budget`,
budget.py). Every arm and seed is scored greedily on one held-out set (or `--data FILE`), with
the role assignment its run learned; convergence is read from the held-out curve that
`train.eval_every` logs, never from training success (docs/metrics.md).

Runs live in `<out>/<spec name>/seed<k>`. A run whose spec.yaml equals the resolved spec and
that finished is reused (not retrained); an unfinished one is resumed; a stale one (spec
changed) is replaced. Held-out scores are cached per run in `compare_eval.json`, keyed by the
problems' content and the checkpoint, so a second call neither retrains nor re-scores.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from rich.console import Console

from pettingllms_cli import distributed
from pettingllms_cli.analysis.budget import budget_overrides, check_equal_arms, describe_budget, roles_of
from pettingllms_cli.analysis.render import console_table, ratios_table, verdict, write_outputs
from pettingllms_cli.analysis.stats import convergence_step, factor_interval, mean_interval, ratio, wilson_interval
from pettingllms_cli.envs import Problem
from pettingllms_cli.envs.loading import problems_fingerprint
from pettingllms_cli.errors import UserError
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
    """`done` (reuse), `partial` (resume), `stale` (replace) or `new`."""
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
    finished = spec.train.steps in steps and (run_dir / "eval_after.json").is_file()
    return "done" if finished else ("partial" if steps else "stale")


def ensure_run(spec: Experiment, run_dir: Path, console: Console) -> str:
    """Train the run unless a finished one with this exact spec exists; returns what happened."""
    from pettingllms_cli.training.loop import train

    state = distributed.on_main(run_state, spec, run_dir)  # one decision for all ranks: rank 0 may be writing run_dir
    if state == "done":
        console.print(f"reusing {run_dir} (same spec and seed, finished)", markup=False, highlight=False)
        return "reused"
    console.print(
        f"{'resuming' if state == 'partial' else 'training'} {run_dir}"
        + (" (spec changed)" if state == "stale" and run_dir.exists() else ""),
        markup=False,
        highlight=False,
    )
    train(spec, run_dir, resume=state == "partial", overwrite=state == "stale", console=console)
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
    `train.eval_every` steps) reaches `threshold` over `window` points; None without that curve.
    """
    from pettingllms_cli.analysis.report import read_metrics

    rows = read_metrics(run_dir)
    heldout = [(r["step"], r["heldout_success_rate"]) for r in rows if r.get("heldout_success_rate") is not None]
    steps, curve = [s for s, _ in heldout], [v for _, v in heldout]
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
        "convergence_step": convergence_step(steps, curve, threshold, window) if curve else None,
        "heldout_curve": [[s, v] for s, v in heldout],
        **spent(rows),
    }


def spent(rows: list[dict]) -> dict:
    """A run's compute from its metrics.jsonl (docs/metrics.md): what `--budget` levels, measured."""
    return {
        "sampled_actions": sum(r.get("sampled_actions", 0) for r in rows),
        "playout_actions": sum(r.get("playout_actions", 0) for r in rows),  # not trained; tokens in sampled_tokens
        "sampled_tokens": sum(r.get("tokens_generated", 0) for r in rows),
        "trained_tokens": sum(r.get("trained_tokens", 0) for r in rows),
        "optimizer_steps": sum(r.get("optimizer_steps", 0) for r in rows),
        "wall_seconds": round(sum(r.get("seconds", 0.0) for r in rows), 3),
        "sampled_actions_per_step": rows[0].get("sampled_actions") if rows else None,
    }


# --- aggregation over seeds ---------------------------------------------------------------------------
def success_interval(values: list[float], successes: int, episodes: int) -> tuple[float, list[float], str]:
    """Mean over seeds with a 95% t interval; the Wilson interval over all episodes with one seed or
    when every seed scored the same (a zero-width interval would claim certainty the episodes lack).

    >>> success_interval([0.5], 2, 4)[2], success_interval([0.25, 0.75], 4, 8)[1]
    ('wilson over episodes', [0.0, 1.0])
    >>> [round(x, 4) for x in success_interval([0.0, 0.0], 0, 4)[1]]
    [0.0, 0.4899]
    """
    mean, half = mean_interval(values)
    if not half:
        return mean, list(wilson_interval(successes, episodes)), "wilson over episodes"
    return mean, [max(0.0, mean - half), min(1.0, mean + half)], "t over seeds"


def spec_row(spec: Experiment, path: Path, runs: list[dict]) -> dict:
    """The table row of one spec: means over its seeds."""
    final, final_ci, method = success_interval(
        [r["final_success"] for r in runs], sum(r["final_successes"] for r in runs), sum(r["episodes"] for r in runs)
    )
    initial, initial_half = mean_interval([r["initial_success"] for r in runs])
    reached = [r["convergence_step"] for r in runs if r["convergence_step"] is not None]
    # Runs that never reach the threshold count as the whole budget (a lower bound on their convergence step).
    censored = [r["convergence_step"] if r["convergence_step"] is not None else r["steps"] for r in runs]
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
        "convergence_step": sum(censored) / len(censored) if reached else None,
        "converged_seeds": len(reached),
        **{key: _mean([float(r[key]) for r in runs]) for key in SPENT},
    }


SPENT = (
    "sampled_actions",
    "playout_actions",
    "sampled_tokens",
    "trained_tokens",
    "optimizer_steps",
    "wall_seconds",
    "sampled_actions_per_step",
)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def ratios(a: dict, b: dict, runs_a: list[dict] | None = None, runs_b: list[dict] | None = None) -> dict:
    """B relative to A, each factor > 1 when B does better: success B/A, attempts A/B, convergence step A/B.

    Each factor has a 95% t interval over per-seed ratios (stats.factor_interval) when runs are given.

    >>> r = ratios({"spec": "a", "final_success": 0.2, "mean_attempts": 2.0, "convergence_step": 8.0},
    ...            {"spec": "b", "final_success": 0.5, "mean_attempts": 1.5, "convergence_step": 4.0})
    >>> round(r["improvement_factor"], 3), round(r["success_gain"], 3), round(r["attempts_factor"], 3), r["convergence_factor"]
    (2.5, 0.3, 1.333, 2.0)
    """
    runs_a, runs_b = runs_a or [a_row_as_run(a)], runs_b or [a_row_as_run(b)]
    n = min(len(runs_a), len(runs_b))
    runs_a, runs_b = runs_a[:n], runs_b[:n]

    def paired(key: str, b_over_a: bool) -> dict:
        num, den = [r.get(key) for r in (runs_b if b_over_a else runs_a)], [r.get(key) for r in (runs_a if b_over_a else runs_b)]
        return factor_interval(num, den)

    success = paired("final_success", True)
    attempts = paired("final_attempts", False)
    convergence = paired("convergence_step", False)
    return {
        "pair": f"{b['spec']}/{a['spec']}",
        "improvement_factor": ratio(b["final_success"], a["final_success"]),
        "improvement_factor_ci": success["ci"],
        "success_gain": b["final_success"] - a["final_success"],
        "attempts_factor": ratio(a["mean_attempts"], b["mean_attempts"]),
        "attempts_factor_ci": attempts["ci"],
        "convergence_factor": ratio(a["convergence_step"], b["convergence_step"]),
        "convergence_factor_ci": convergence["ci"],
    }


def a_row_as_run(row: dict) -> dict:
    """A table row standing in for its single run (for ratios of rows without runs)."""
    return {
        "final_success": row["final_success"],
        "final_attempts": row["mean_attempts"],
        "convergence_step": row["convergence_step"],
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
) -> dict:
    """Train (or reuse) every spec x seed at levelled compute, score all on one held-out set, write the three files."""
    from pettingllms_cli.training.lock import writer_lock

    console = console or Console()
    if seeds < 1:
        raise UserError(f"--seeds {seeds}: need at least one seed")
    specs = load_arms(paths, max_steps)
    check_comparable(paths, specs, allow_unequal)
    levelled = budget_overrides(paths, specs, budget)
    if any(s.train.eval_every is None for s in specs):
        console.print("no held-out curve (train.eval_every unset): convergence will not be measured; set train.eval_every")
    base = specs[0]
    problems = held_out(base, episodes, data)
    rows, runs_by_spec = [], {}
    for path, spec, extra in zip(paths, specs, levelled, strict=True):
        runs = []
        for seed in range(seeds):
            run_spec = seeded(path, seed, max_steps, extra)
            run_dir = out / spec.name / f"seed{seed}"
            with writer_lock(run_dir, "then rerun this compare (finished runs are reused)"):  # one writer per run
                status = ensure_run(run_spec, run_dir, console)
                scored = score_run(run_spec, run_dir, problems)
            runs.append(run_summary(run_spec, run_dir, status, scored, threshold, window))
        runs_by_spec[spec.name] = runs
        rows.append(spec_row(spec, path, runs))
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
            "how": describe_budget(budget),
            "overrides": {spec.name: extra for spec, extra in zip(specs, levelled, strict=True)},
            "sampled_actions_per_step": {row["spec"]: row["sampled_actions_per_step"] for row in rows},
        },
        "seeds": list(range(seeds)),
        "convergence": {
            "metric": "heldout_success_rate (greedy, every train.eval_every steps)",
            "threshold": threshold,
            "window": window,
        },
        "rows": rows,
        "ratios": [ratios(rows[0], row, runs_by_spec[rows[0]["spec"]], runs_by_spec[row["spec"]]) for row in rows[1:]],
        "runs": runs_by_spec,
    }
    result["verdict"] = verdict(result)
    write_outputs(out, result)
    return result


def held_out(base: Experiment, episodes: int | None, data: str | None) -> list[Problem]:
    """The problems every arm is scored on: the first spec's held-out split, or that of `--data FILE` (as `eval --data`)."""
    from pettingllms_cli.analysis.evaluate import eval_problems

    if data is not None:
        base = base.model_copy(update={"env": base.env.model_copy(update={"data": data})})
    return eval_problems(base, "test", base.seed, episodes or base.env.eval_problems)


__all__ = ["compare", "console_table", "ratios_table"]  # cli.py prints the tables compare_report.py builds
