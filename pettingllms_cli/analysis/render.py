"""What `compare` writes and prints: a one-sentence verdict, then per-arm tables, factors, held-out curves and links.

compare.md, compare.html and the terminal open with the verdict: which arm won held-out success
and by how much, whether the paired difference over seeds is clear of 0, and at what compute each arm ran.
"""

from __future__ import annotations

import html
from pathlib import Path

from rich.table import Table

from pettingllms_cli import distributed
from pettingllms_cli.analysis.compare_curves import curve_plots, report_links
from pettingllms_cli.analysis.plots import fmt, html_images, html_page, html_table, md_table
from pettingllms_cli.analysis.stats import paired_difference
from pettingllms_cli.jsonio import write_json

ROW_HEADERS = [
    "spec",
    "layout",
    "roles",
    "seeds",
    "K",
    "held-out before",
    "held-out after",
    "95% CI",
    "attempts (solved)",
    "convergence [95% CI] (seeds)",
    "actions total (sampled + play-outs + intents)",
    "tokens total",
    "trained tokens",
    "optimizer steps (effective)",
    "wall s (training + measurement)",
]
RATIO_HEADERS = [
    "B/A",
    "success factor",
    "95% CI",
    "success gain (paired)",
    "95% CI",
    "seeds to separate",
    "attempts factor",
    "95% CI",
    "convergence factor",
    "95% CI",
]
RUN_HEADERS = [
    "spec",
    "seed",
    "status",
    "before",
    "after",
    "attempts",
    "convergence step",
    "actions total",
    "tokens total",
    "trained tokens",
    "optimizer steps (effective)",
    "wall s (training + measurement)",
]


def _ci(ci: list[float | None] | None, digits: int = 3) -> str | None:
    """[lo, hi]; an upper end of None is unbounded (a convergence interval that reaches "never")."""
    if ci is None:
        return None
    hi = "never" if ci[1] is None else f"{ci[1]:.{digits}f}"
    lo = "never" if ci[0] is None else f"{ci[0]:.{digits}f}"
    return f"[{lo}, {hi}]"


def _convergence(row: dict) -> str:
    """The censored convergence figure in its unit, its interval, and how many seeds converged.

    >>> _convergence({"convergence": 12.0, "convergence_ci": [4.0, None], "convergence_unit": "steps",
    ...               "converged_seeds": 1, "seeds": 3})
    '12.0 steps [4.0, never] (1/3 seeds)'
    >>> _convergence({"convergence": None, "convergence_ci": None, "convergence_unit": "steps", "converged_seeds": 0, "seeds": 2})
    'never (0/2 seeds)'
    """
    seeds = f"({row['converged_seeds']}/{row['seeds']} seeds)"
    if row.get("kind", "arm") != "arm":
        return "n/a (scored from the arm's runs)"
    if row["convergence"] is None:
        return f"never {seeds}"
    ci = _ci(row["convergence_ci"], 1)
    return f"{row['convergence']:,.1f} {row['convergence_unit']}{' ' + ci if ci else ''} {seeds}"


def _count(value: float | None) -> str:
    return "?" if value is None else f"{value:,.0f}"


def _actions(row: dict) -> str:
    parts = " + ".join(_count(row[key]) for key in ("sampled_actions", "playout_actions", "intent_actions"))
    return f"{_count(row['actions_total'])} ({parts})"


def _steps(row: dict) -> str:
    return f"{_count(row['optimizer_steps'])} ({_count(row['effective_optimizer_steps'])})"


def _wall(row: dict) -> str:
    return f"{row['wall_seconds']:.1f} ({row['wall_seconds_training']:.1f} + {row['wall_seconds_measurement']:.1f})"


def row_cells(row: dict) -> list:
    """One spec's row; compute columns are totals per seed (whole run), averaged over seeds."""
    return [
        row["spec"],
        row["layout"],
        row["roles"],
        row["seeds"],
        row["group_size"],
        row["initial_success"],
        row["final_success"],
        _ci(row["final_success_ci"]),
        row["mean_attempts"],
        _convergence(row),
        _actions(row),
        _count(row["tokens_total"]),
        _count(row["trained_tokens"]),
        _steps(row),
        _wall(row),
    ]


def ratio_cells(r: dict) -> list:
    return [
        r["pair"],
        r["improvement_factor"],
        _ci(r["improvement_factor_ci"], 2),
        r["success_gain"],
        _ci(r["success_gain_ci"], 3),
        r["seeds_to_separate"],
        r["attempts_factor"],
        _ci(r["attempts_factor_ci"], 2),
        r["convergence_factor"],
        _ci(r["convergence_factor_ci"], 2),
    ]


def run_cells(result: dict) -> list[list]:
    return [
        [
            name,
            r["seed"],
            r["status"],
            r["initial_success"],
            r["final_success"],
            r["final_attempts"],
            "never" if r["convergence_step"] is None else r["convergence_step"],
            _actions(r),
            _count(r["tokens_total"]),
            _count(r["trained_tokens"]),
            _steps(r),
            _wall(r),
        ]
        for name, runs in result["runs"].items()
        for r in runs
    ]


# --- the verdict ---------------------------------------------------------------------------------------------
def separate(a: list[float], b: list[float]) -> bool:
    """Do two intervals not overlap?

    >>> separate([0.1, 0.3], [0.4, 0.9]), separate([0.1, 0.5], [0.4, 0.9])
    (True, False)
    """
    return a[1] < b[0] or b[1] < a[0]


def compute_phrase(row: dict) -> str:
    return (
        f"{row['spec']} {_count(row['actions_total'])} actions ({_count(row['sampled_actions'])} sampled actions, "
        f"{_count(row['playout_actions'])} play-outs, {_count(row['intent_actions'])} intents) / "
        f"{_count(row['tokens_total'])} tokens"
    )


def paired_phrase(result: dict, best: dict, runner: dict) -> str:
    """How sure the win is: the paired difference over seeds (same seeds, same problems) and its 95% interval; with
    one seed, the two arms' intervals (one method for both, compare.interval_method)."""
    runs = result.get("runs", {})
    if best["spec"] not in runs or runner["spec"] not in runs:
        return f"the 95% intervals {_ci(best['final_success_ci'])} and {_ci(runner['final_success_ci'])} " + (
            "separate" if separate(best["final_success_ci"], runner["final_success_ci"]) else "overlap"
        )
    a, b = ([r["final_success"] for r in runs[row["spec"]]] for row in (runner, best))
    d = paired_difference(a, b, bounds=(-1.0, 1.0))
    if d["ci"] is None:
        return (
            f"with {d['seeds']} paired seed there is no interval over seeds (the arms' 95% intervals "
            f"{_ci(best['final_success_ci'])} and {_ci(runner['final_success_ci'])} "
            f"{'separate' if separate(best['final_success_ci'], runner['final_success_ci']) else 'overlap'})"
        )
    said = f"paired over {d['seeds']} seeds the difference is {d['difference']:+.3f}, 95% interval {_ci(d['ci'])}"
    if d["separate"]:
        return f"{said}, which excludes 0"
    more = d["seeds_to_separate"]
    need = "no number of seeds would separate them" if more is None else f"about {more} seeds would separate them"
    return f"{said}, which includes 0: {need} at this spread"


def trained_arms(result: dict) -> list[dict]:
    """The rows of the arms compare trained, without the rows scored from their runs (untrained, K samples)."""
    return [r for r in result["rows"] if r.get("kind", "arm") == "arm"]


def verdict(result: dict) -> str:
    """One sentence: who won held-out success and by how much, whether the paired difference over seeds is clear of 0,
    at what compute.

    >>> rows = [{"spec": "solo", "final_success": 0.5, "final_success_ci": [0.3, 0.7], "sampled_actions": 64,
    ...          "playout_actions": 0, "intent_actions": 0, "actions_total": 64, "tokens_total": 500},
    ...         {"spec": "team", "final_success": 0.75, "final_success_ci": [0.55, 0.9], "sampled_actions": 64,
    ...          "playout_actions": 12, "intent_actions": 0, "actions_total": 76, "tokens_total": 520}]
    >>> runs = {"solo": [{"final_success": 0.5}, {"final_success": 0.5}], "team": [{"final_success": 1.0},
    ...         {"final_success": 0.5}]}
    >>> verdict({"rows": rows, "runs": runs, "budget": {"mode": "actions"}, "seeds": [0, 1]})  # doctest: +NORMALIZE_WHITESPACE
    'team won held-out success, 0.750 vs 0.500 for solo (+0.250, 1.50x); paired over 2 seeds the difference is +0.250,
    95% interval [-1.000, 1.000], which includes 0: about 11 seeds would separate them at this spread; compute per
    seed (--budget actions): solo 64 actions (64 sampled actions, 0 play-outs, 0 intents) / 500 tokens, team 76
    actions (64 sampled actions, 12 play-outs, 0 intents) / 520 tokens.'
    """
    arms = trained_arms(result)
    rows = sorted(arms, key=lambda r: -r["final_success"])
    best, runner = rows[0], rows[1]
    compute = ", ".join(compute_phrase(r) for r in arms)
    tail = f"compute per seed (--budget {result['budget']['mode']}): {compute}."
    if best["final_success"] == runner["final_success"]:
        return f"No arm won held-out success: {best['spec']} and {runner['spec']} both scored {best['final_success']:.3f}; {tail}"
    gain = best["final_success"] - runner["final_success"]
    factor = f", {best['final_success'] / runner['final_success']:.2f}x" if runner["final_success"] else ""
    return (
        f"{best['spec']} won held-out success, {best['final_success']:.3f} vs {runner['final_success']:.3f} for "
        f"{runner['spec']} ({gain:+.3f}{factor}); {paired_phrase(result, best, runner)}; {tail}"
    )


def training_phrase(result: dict) -> str:
    """What training bought each arm (final minus step 0 of the same runs) and how the K-sample rows were matched.

    >>> row = {"spec": "team", "kind": "arm", "initial_success": 0.25, "final_success": 0.5,
    ...        "gain_over_untrained": 0.25, "gain_over_untrained_ci": [0.1, 0.4]}
    >>> training_phrase({"rows": [row]}).split(": ", 1)[1]
    'team 0.250 -> 0.500, +0.250 [0.100, 0.400].'
    """
    parts = [
        f"{r['spec']} {r['initial_success']:.3f} -> {r['final_success']:.3f}, {r['gain_over_untrained']:+.3f}"
        + (f" {_ci(r['gain_over_untrained_ci'])}" if r.get("gain_over_untrained_ci") else " (one seed: no interval)")
        for r in trained_arms(result)
        if r.get("gain_over_untrained") is not None
    ]
    said = "Training bought, paired over seeds (final - step 0 of the same runs, same problems): " + "; ".join(parts) + "."
    voted = [r for r in result["rows"] if r.get("kind") == "majority_of_k"]
    for r in voted:
        said += f" {r['of']} at the team's evaluation compute: {r['evaluation']['matched']}."
    if any(r.get("kind") == "best_of_k_oracle" for r in result["rows"]):
        said += " Rows marked oracle pick by the answer key: an upper bound, not what a policy does."
    return said


def describe(result: dict) -> str:
    h, c, b = result["held_out"], result["convergence"], result["budget"]
    held_out = f"{len(h['problems'])} held-out problems ({h['data']}, split {h['split']}, seed {h['seed']}, {h['decoding']})"
    method = result["rows"][0]["ci_method"] if result["rows"] else "t over seeds"
    return (
        f"{result['env']}: {held_out}, seeds {result['seeds']}. Success is the share of held-out problems the team solves "
        f"within its turns; every arm's 95% interval is by one method, here {method} (Wilson over all episodes for every "
        "arm when an arm has one seed or seeds that all scored alike). Attempts: attempts until the first success, over "
        f"solved episodes only. Convergence: first step at which the {c['window']}-point mean of the held-out curve "
        f"({c['metric']}) reaches {c['threshold']}, counted in {c.get('unit', 'steps')} (actions or tokens when the arms' "
        "steps differ); over seeds it is 1 / the mean of 1/cost, a seed that never converges counting 1/cost = 0, so it "
        "is never read as converging at its last step (none without train.eval_every). "
        f"Budget `{b['mode']}`: {b['how']}. Compute columns are whole-run totals per seed, averaged over seeds; trained "
        "tokens count only losses with a gradient, effective optimizer steps only updates that moved an adapter. Factors "
        "are each spec over the first, > 1 when it does better (success B/A, attempts A/B, convergence rate B/A), over "
        "paired seeds (same seed, same problems), each with a 95% interval from the same ratio-of-means estimator as its "
        "point; success gain is the paired difference B - A with its 95% t interval and the seeds that would separate it."
    )


# --- files and terminal ------------------------------------------------------------------------------------
def links_md(result: dict, out: Path) -> list[str]:
    """One line per arm linking its runs' report.md files."""
    lines = []
    for name, links in report_links(result, out):
        seeds = ", ".join(f"[{label}]({path[: -len('html')]}md)" if path else f"{label} (no report)" for label, path in links)
        lines.append(f"- {name}: {seeds}")
    return lines


def links_html(result: dict, out: Path) -> str:
    """A list per arm linking its runs' report.html files (relative, so the folder can be moved whole)."""
    items = []
    for name, links in report_links(result, out):
        seeds = ", ".join(
            f'<a href="{html.escape(path)}">{html.escape(label)}</a>' if path else f"{html.escape(label)} (no report)"
            for label, path in links
        )
        items.append(f"<li><strong>{html.escape(name)}</strong>: {seeds}</li>")
    return f'<ul class="links">{"".join(items)}</ul>'


def write_outputs(out: Path, result: dict) -> None:
    if not distributed.is_main():
        return  # rank 0 alone writes
    write_json(out / "compare.json", result, then="choose another --out")
    title = "Compare: " + " vs ".join(r["spec"] for r in trained_arms(result))
    rows = [row_cells(r) for r in result["rows"]]
    ratio_rows = [ratio_cells(r) for r in result["ratios"]]
    md = [
        f"# {title}",
        "",
        f"**{result['verdict']}**",
        "",
        training_phrase(result),
        "",
        describe(result),
        "",
        *md_table(ROW_HEADERS, rows),
        "",
        "## Factors",
        "",
        *md_table(RATIO_HEADERS, ratio_rows),
        "",
        "## Runs",
        "",
        *md_table(RUN_HEADERS, run_cells(result)),
        "",
    ]
    md += ["## Each run's report", "", *links_md(result, out), ""]
    (out / "compare.md").write_text("\n".join(md), encoding="utf-8")
    plots = curve_plots(result)
    body = (
        f"<h1>{html.escape(title)}</h1><p><strong>{html.escape(result['verdict'])}</strong></p>"
        f"<p>{html.escape(training_phrase(result))}</p>"
        f"<p>{html.escape(describe(result))}</p>{html_table(ROW_HEADERS, rows)}"
        + (f"<h2>Factors</h2>{html_table(RATIO_HEADERS, ratio_rows)}" if ratio_rows else "")
        + (f"<h2>Held-out curves</h2>{html_images(plots)}" if plots else "")
        + f"<h2>Runs</h2>{html_table(RUN_HEADERS, run_cells(result))}"
        + f"<h2>Each run's report</h2>{links_html(result, out)}"
    )
    (out / "compare.html").write_text(html_page(title, body), encoding="utf-8")


def console_table(result: dict) -> Table:
    """The spec rows, narrowed to fit 80 columns (compare.md has every column); spec names are never cut."""
    table = Table(title="compare: held-out success (greedy)", title_justify="left", pad_edge=False)
    table.add_column("spec", no_wrap=True, overflow="fold")
    for header in ("before", "after", "95% CI", "attempts", "converged", "actions/seed"):
        table.add_column(header, justify="right")
    for row in result["rows"]:
        table.add_row(
            row["spec"],
            fmt(row["initial_success"], 2),
            fmt(row["final_success"], 2),
            _ci(row["final_success_ci"], 2),
            fmt(row["mean_attempts"], 2),
            f"{row['converged_seeds']}/{row['seeds']}",
            _count(row["actions_total"]),
        )
    return table


def ratios_table(result: dict) -> Table:
    table = Table(title="factors (> 1: B better)", title_justify="left", pad_edge=False)
    table.add_column("B/A", no_wrap=True, overflow="fold")
    for header in ("success", "attempts", "convergence"):
        table.add_column(header, justify="right")
    for r in result["ratios"]:
        cells = [
            f"{fmt(r[key], 2)} {_ci(r[key + '_ci'], 2) or ''}".strip()
            for key in ("improvement_factor", "attempts_factor", "convergence_factor")
        ]
        table.add_row(r["pair"], *cells)
    return table
