"""What `compare` writes and prints: a one-sentence verdict, then per-arm tables, factors and held-out curves.

compare.md, compare.html and the terminal open with the verdict: which arm won held-out success
and by how much, whether the 95% intervals separate, and at what compute each arm ran.
"""

from __future__ import annotations

import html
from pathlib import Path

from rich.table import Table

from pettingllms_cli import distributed
from pettingllms_cli.analysis.plots import fmt, html_images, html_page, html_table, line_plot, md_table
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
    "convergence step",
    "sampled actions",
    "sampled tokens",
    "trained tokens",
    "optimizer steps",
    "wall s",
]
RATIO_HEADERS = ["B/A", "success factor", "95% CI", "success gain", "attempts factor", "95% CI", "convergence factor", "95% CI"]
RUN_HEADERS = [
    "spec",
    "seed",
    "status",
    "before",
    "after",
    "attempts",
    "convergence step",
    "sampled actions",
    "sampled tokens",
    "trained tokens",
    "optimizer steps",
    "wall s",
]


def _ci(ci: list[float] | None, digits: int = 3) -> str | None:
    return None if ci is None else f"[{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


def _convergence(row: dict) -> str | None:
    conv = row["convergence_step"]
    return None if conv is None else f"{conv:.1f} ({row['converged_seeds']}/{row['seeds']} seeds)"


def row_cells(row: dict) -> list:
    """One spec's row; compute columns are means per seed."""
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
        round(row["sampled_actions"]),
        round(row["sampled_tokens"]),
        round(row["trained_tokens"]),
        round(row["optimizer_steps"]),
        f"{row['wall_seconds']:.1f}",
    ]


def ratio_cells(r: dict) -> list:
    return [
        r["pair"],
        r["improvement_factor"],
        _ci(r["improvement_factor_ci"], 2),
        r["success_gain"],
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
            r["convergence_step"],
            r["sampled_actions"],
            r["sampled_tokens"],
            r["trained_tokens"],
            r["optimizer_steps"],
            f"{r['wall_seconds']:.1f}",
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
    return f"{row['spec']} {row['sampled_actions']:,.0f} sampled actions / {row['sampled_tokens']:,.0f} tokens"


def verdict(result: dict) -> str:
    """One sentence: who won held-out success and by how much, whether the 95% intervals separate, at what compute.

    >>> rows = [{"spec": "solo", "final_success": 0.5, "final_success_ci": [0.3, 0.7], "sampled_actions": 64,
    ...          "sampled_tokens": 500}, {"spec": "team", "final_success": 0.75, "final_success_ci": [0.55, 0.9],
    ...          "sampled_actions": 64, "sampled_tokens": 520}]
    >>> verdict({"rows": rows, "budget": {"mode": "actions"}, "seeds": [0, 1]})  # doctest: +NORMALIZE_WHITESPACE
    'team won held-out success, 0.750 vs 0.500 for solo (+0.250, 1.50x); the 95% intervals [0.550, 0.900] and
    [0.300, 0.700] overlap, so 2 seeds do not separate them; compute per seed (--budget actions): solo 64 sampled
    actions / 500 tokens, team 64 sampled actions / 520 tokens.'
    """
    rows = sorted(result["rows"], key=lambda r: -r["final_success"])
    best, runner = rows[0], rows[1]
    compute = ", ".join(compute_phrase(r) for r in result["rows"])
    tail = f"compute per seed (--budget {result['budget']['mode']}): {compute}."
    if best["final_success"] == runner["final_success"]:
        return f"No arm won held-out success: {best['spec']} and {runner['spec']} both scored {best['final_success']:.3f}; {tail}"
    gain = best["final_success"] - runner["final_success"]
    factor = f", {best['final_success'] / runner['final_success']:.2f}x" if runner["final_success"] else ""
    apart = separate(best["final_success_ci"], runner["final_success_ci"])
    seeds = len(result["seeds"])
    intervals = f"the 95% intervals {_ci(best['final_success_ci'])} and {_ci(runner['final_success_ci'])}"
    how = "separate" if apart else f"overlap, so {'1 seed does' if seeds == 1 else f'{seeds} seeds do'} not separate them"
    return (
        f"{best['spec']} won held-out success, {best['final_success']:.3f} vs {runner['final_success']:.3f} for "
        f"{runner['spec']} ({gain:+.3f}{factor}); {intervals} {how}; {tail}"
    )


def describe(result: dict) -> str:
    h, c, b = result["held_out"], result["convergence"], result["budget"]
    held_out = f"{len(h['problems'])} held-out problems ({h['data']}, split {h['split']}, seed {h['seed']}, {h['decoding']})"
    return (
        f"{result['env']}: {held_out}, seeds {result['seeds']}. Success is the share of held-out problems the team solves "
        "within its turns; the 95% interval is a t interval over seeds (Wilson over all episodes when there is one seed "
        "or all seeds agree). Attempts: attempts until the first success, over solved episodes only. "
        f"Convergence: first step at which the {c['window']}-point mean of the held-out curve ({c['metric']}) reaches "
        f"{c['threshold']} (seeds that never reach it count as the whole run; none without train.eval_every). "
        f"Budget `{b['mode']}`: {b['how']}. Factors are each spec over the first, > 1 when it does better "
        "(success B/A, attempts A/B, convergence step A/B), with a t interval over per-seed ratios."
    )


# --- files and terminal ------------------------------------------------------------------------------------
def write_outputs(out: Path, result: dict) -> None:
    if not distributed.is_main():
        return  # rank 0 alone writes
    write_json(out / "compare.json", result, then="choose another --out")
    title = "Compare: " + " vs ".join(r["spec"] for r in result["rows"])
    rows = [row_cells(r) for r in result["rows"]]
    ratio_rows = [ratio_cells(r) for r in result["ratios"]]
    md = [
        f"# {title}",
        "",
        f"**{result['verdict']}**",
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
    (out / "compare.md").write_text("\n".join(md), encoding="utf-8")
    body = (
        f"<h1>{html.escape(title)}</h1><p><strong>{html.escape(result['verdict'])}</strong></p>"
        f"<p>{html.escape(describe(result))}</p>{html_table(ROW_HEADERS, rows)}"
        f"<h2>Factors</h2>{html_table(RATIO_HEADERS, ratio_rows)}"
        f"<h2>Held-out curves</h2>{html_images(curve_plots(result))}"
        f"<h2>Runs</h2>{html_table(RUN_HEADERS, run_cells(result))}"
    )
    (out / "compare.html").write_text(html_page(title, body), encoding="utf-8")


def mean_curve(runs: list[dict]) -> tuple[list[int], list[float]]:
    """The held-out curve averaged over seeds, at the steps every seed scored.

    >>> mean_curve([{"heldout_curve": [[2, 0.5], [4, 1.0]]}, {"heldout_curve": [[2, 0.0], [4, 0.5]]}])
    ([2, 4], [0.25, 0.75])
    """
    common = set.intersection(*(set(s for s, _ in r["heldout_curve"]) for r in runs)) if runs else set()
    steps = sorted(common)
    means = [sum(dict(map(tuple, r["heldout_curve"]))[s] for r in runs) / len(runs) for s in steps]
    return steps, means


def curve_plots(result: dict) -> dict[str, bytes]:
    """Held-out success (train.eval_every) per step, mean over seeds, one line per spec."""
    series = {name: mean_curve(runs) for name, runs in result["runs"].items()}
    series = {name: xy for name, xy in series.items() if xy[0]}
    title = "Held-out success while training (greedy, mean over seeds)"
    return {"heldout_success": line_plot(series, title, "held-out success")} if series else {}


def console_table(result: dict) -> Table:
    """The spec rows, narrowed to fit 80 columns (compare.md has every column); spec names are never cut."""
    table = Table(title="compare: held-out success (greedy)", title_justify="left", pad_edge=False)
    table.add_column("spec", no_wrap=True, overflow="fold")
    for header in ("before", "after", "95% CI", "attempts", "conv. step", "actions/seed"):
        table.add_column(header, justify="right")
    for row in result["rows"]:
        conv = row["convergence_step"]
        table.add_row(
            row["spec"],
            fmt(row["initial_success"], 2),
            fmt(row["final_success"], 2),
            _ci(row["final_success_ci"], 2),
            fmt(row["mean_attempts"], 2),
            fmt(None if conv is None else float(conv), 1),
            f"{row['sampled_actions']:,.0f}",
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
