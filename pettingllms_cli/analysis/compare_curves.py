"""What compare.html draws and links from each arm's runs: held-out curves from step 0 with their bands, and the
runs' own reports.

Each run's curve is its own (curves.py: step 0 from eval_before.json, then every `train.eval_every` point). An
arm's curve is the mean over its seeds at the steps all of them scored, shaded with the 95% Wilson interval over
all their episodes there. When the arms' steps differ in cost (compare levelled them by actions or tokens), the
x axis is that compute, spent by the end of each step, so a point of one arm sits beside the point of another that
cost as much.
"""

from __future__ import annotations

import os
from pathlib import Path

from pettingllms_cli.analysis import curves
from pettingllms_cli.analysis.header import read_spec, section
from pettingllms_cli.analysis.plots import line_plot
from pettingllms_cli.analysis.report import read_eval, read_metrics

SPENT_KEY = {"actions": "actions_total", "tokens": "tokens_generated"}  # metrics.jsonl key per convergence unit


def spent_by_step(rows: list[dict], unit: str) -> dict[int, float]:
    """step -> what the run had spent by the end of it (the step itself under "steps"); step 0 spent nothing.

    >>> spent_by_step([{"step": 1, "actions_total": 8}, {"step": 2, "actions_total": 8}], "actions")
    {0: 0.0, 1: 8.0, 2: 16.0}
    """
    if unit not in SPENT_KEY:
        return {0: 0.0, **{r["step"]: float(r["step"]) for r in rows}}
    total, out = 0.0, {0: 0.0}
    for r in rows:
        value = r.get(SPENT_KEY[unit])
        total += value if isinstance(value, int | float) else 0.0
        out[r["step"]] = total
    return out


def run_curve(run_dir: Path) -> tuple[list[curves.Point], list[dict]]:
    """A run's held-out curve from step 0 (empty without `train.eval_every`), and its metrics rows."""
    rows = read_metrics(run_dir)
    subset = section(read_spec(run_dir), "train").get("eval_subset")
    before = read_eval(run_dir / "eval_before.json")
    return curves.heldout_curve(rows, before, subset if isinstance(subset, int) else None), rows


def arm_series(runs: list[dict], unit: str) -> tuple[list[float], list[float], tuple[list[float], list[float]]] | None:
    """(x, mean success, band) of one arm over its seeds; None when a seed has no curve."""
    per_run = [run_curve(Path(r["run_dir"])) for r in runs if r.get("run_dir")]
    points = curves.pooled([p for p, _ in per_run])
    if not points:
        return None
    spent = [spent_by_step(rows, unit) for _, rows in per_run]
    x = [sum(s.get(p.step, 0.0) for s in spent) / len(spent) for p in points]
    _, rates, band = curves.series(points)
    return x, rates, band


def curve_plots(result: dict) -> dict[str, bytes]:
    """One PNG: every arm's held-out curve from step 0 with its band; {} when no arm logged a curve."""
    unit = result.get("convergence", {}).get("unit", "steps")
    series, bands = {}, {}
    for name, runs in result["runs"].items():
        drawn = arm_series(runs, unit)
        if drawn:
            x, rates, band = drawn
            series[name], bands[name] = (x, rates), band
    if not series:
        return {}
    xlabel = "step" if unit not in SPENT_KEY else f"{unit} spent (whole run, mean over seeds)"
    title = "Held-out success from step 0 (greedy, mean over seeds, 95% band)"
    plot = line_plot(series, title, "held-out success", xlabel=xlabel, bands=bands, rate=True, width=9.0)
    return {"heldout_success": plot}


def report_links(result: dict, out: Path) -> list[tuple[str, list[tuple[str, str | None]]]]:
    """Per arm, (seed label, path of its report.html relative to `out`, None when the run has no report yet)."""
    arms = []
    for name, runs in result["runs"].items():
        links = []
        for r in runs:
            page = Path(r.get("run_dir", "")) / "report.html"
            links.append((f"seed {r.get('seed')}", os.path.relpath(page, out) if page.is_file() else None))
        arms.append((name, links))
    return arms
