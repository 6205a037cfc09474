"""`compare`'s figures: one run's row from its metrics.jsonl and held-out scores (`run_summary`, `spent`), one arm's
row over its seeds (`spec_row`), and the factors of each arm against the first (`ratios`); docs/metrics.md defines them.
"""

from __future__ import annotations

import math
from pathlib import Path

from pettingllms_cli.analysis.budget import roles_of
from pettingllms_cli.analysis.stats import (
    censored_convergence,
    convergence_rates,
    convergence_step,
    factor_interval,
    mean,
    mean_interval,
    paired_difference,
    wilson_interval,
)
from pettingllms_cli.analysis.vote import per_problem
from pettingllms_cli.spec import Experiment


# --- one run --------------------------------------------------------------------------------------
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
        "initial_success": scored["initial"]["team_success_rate"],  # step 0 of this run: the untrained team
        "initial_successes": scored["initial"]["successes"],
        "final_success": scored["final"]["team_success_rate"],
        "final_successes": scored["final"]["successes"],
        "episodes": scored["final"]["episodes"],
        "initial_attempts": scored["initial"]["mean_attempts_to_success"],
        "final_attempts": scored["final"]["mean_attempts_to_success"],  # over solved episodes only
        "convergence_step": reached,
        "convergence_actions": None if reached is None else spent(upto)["actions_total"],
        "convergence_tokens": None if reached is None else spent(upto)["tokens_total"],
        "heldout_curve": [[s, v] for s, v in heldout],
        "eval_per_problem": per_problem(scored["final"]),  # greedy final evaluation: actions, tokens a problem
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
    gain = paired_difference([r["initial_success"] for r in runs], [r["final_success"] for r in runs], (-1.0, 1.0))
    return {
        "kind": "arm",
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
        "gain_over_untrained": gain["difference"],  # final minus step 0 of the same runs, mean over seeds
        "gain_over_untrained_ci": gain["ci"],  # 95% t interval over paired seeds (None with one seed)
        "gain_over_untrained_ci_method": "t over paired seeds (final - step 0 of the same run, same problems)",
        "convergence_unit": unit,
        "convergence": converged["cost"],  # 1 / mean rate: None when no seed converged
        "convergence_ci": converged["cost_ci"],  # an upper end of None: "never" is inside the interval
        "convergence_rate": converged["rate"],
        "converged_seeds": converged["converged_seeds"],
        "not_converged_seeds": converged["not_converged_seeds"],
        **{key: mean(r[key] for r in runs) for key in SPENT},
    }


def derived_row(
    arm: dict, kind: str, label: str, values: list[float], successes: int, episodes: int, method: str, **extra
) -> dict:
    """A row scored from an arm's own runs rather than trained on its own: `untrained` (step 0 of those runs, no
    training compute) or `majority_of_k` / `best_of_k_oracle` (the final checkpoints sampled K times a problem, the
    same training compute as the arm). It keeps the arm's columns, so every table shows it beside the arms."""
    final, final_ci, method = success_interval(values, successes, episodes, method)
    row = {
        **arm,
        "kind": kind,
        "of": arm["spec"],
        "spec": f"{arm['spec']} ({label})",
        "final_success": final,
        "final_success_ci": final_ci,
        "ci_method": method,
        "gain_over_untrained": None,
        "gain_over_untrained_ci": None,
        "convergence": None,
        "convergence_ci": None,
        "convergence_rate": None,
        "converged_seeds": 0,
        **extra,
    }
    if kind == "untrained":  # nothing was trained: the run's step 0
        row |= {key: 0 for key in SPENT} | {"mean_attempts": arm.get("initial_attempts")}
    return row


def untrained_row(arm: dict, runs: list[dict], method: str) -> dict:
    """The arm before training: held-out success at step 0 of the very runs its row averages (same problems, greedy)."""
    attempts = [r["initial_attempts"] for r in runs if r.get("initial_attempts") is not None]
    return derived_row(
        arm | {"initial_attempts": sum(attempts) / len(attempts) if attempts else None},
        "untrained",
        "untrained, step 0",
        [r["initial_success"] for r in runs],
        sum(r["initial_successes"] for r in runs),
        sum(r["episodes"] for r in runs),
        method,
        step=0,
    )


def vote_rows(arm: dict, votes: list[dict], method: str, matched: dict) -> list[dict]:
    """The arm's final checkpoints given K sampled episodes a problem: majority vote (no answer key: what a deployed
    agent can do) and any-of-K (reads the answer key: an upper bound, labelled as such)."""
    k, episodes = matched["k"], sum(v["episodes"] for v in votes)
    how = {"k": k, "matched": matched["how"], "temperature": votes[0]["temperature"] if votes else None}
    kinds = (
        (
            "majority_of_k",
            "majority",
            f"majority of {k} samples",
            "the answer most of the K sampled episodes gave (no answer key)",
        ),
        (
            "best_of_k_oracle",
            "oracle",
            f"best of {k} samples, oracle",
            "solved when any of the K sampled episodes is right by the answer key: an upper bound, not a policy",
        ),
    )
    return [
        derived_row(
            arm,
            kind,
            label,
            [v[f"{key}_success"] for v in votes],
            sum(v[f"{key}_successes"] for v in votes),
            episodes,
            method,
            mean_attempts=None,
            evaluation=how | {"picks": picks},
        )
        for kind, key, label, picks in kinds
    ]


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
