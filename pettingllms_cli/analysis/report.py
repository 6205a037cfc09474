"""A run's report: report.md (plots as PNG files beside it) and a self-contained report.html.

Contents, in order: the run header (model, dtype, spec, commit, date) and one sentence on what
training did to held-out success; held-out success before and after (with 95% intervals); the
curves the run measured (held-out success from step 0 with its interval, training success,
per-agent reward, loss, KL, entropy), a panel left out when its quantity was not measured; the
per-step table; the same held-out problems before and after training, failures included.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path

from pettingllms_cli.analysis import curves
from pettingllms_cli.analysis.header import header_items, read_spec, section, summary
from pettingllms_cli.analysis.plots import Series, html_images, html_page, html_table, line_plot, md_table, write_files
from pettingllms_cli.analysis.samples import samples_html, samples_md
from pettingllms_cli.errors import UserError
from pettingllms_cli.jsonio import read_json

PLOTS = {  # file stem -> (metric prefix or key, title, y label)
    "team_success": ("team_success_rate", "Team success: held-out (greedy) and training (sampled)", "success rate"),
    "reward": ("reward/", "Reward per agent", "mean reward"),
    "loss": ("loss/", "Loss per agent", "loss"),
    "kl": ("kl/", "KL to the base per agent", "KL"),
    "entropy": ("entropy/", "Entropy per agent", "nats / token"),
}


def read_metrics(run_dir: Path) -> list[dict]:
    """The step records of metrics.jsonl; a line cut short by a crash (or not a step record) is left out.

    A value the report reads as a number but that is not a finite one (`"NaN"`, a dict, inf) is dropped from its
    row, as if not logged; a row without a whole step and a finite team_success_rate is left out.
    """
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and type(row.get("step")) is int and _number(row.get("team_success_rate")):
            rows.append({k: v for k, v in row.items() if not _plotted(k) or v is None or _number(v)})
    return rows


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _plotted(key: str) -> bool:
    """Keys the report reads as numbers (plots, tables, the summary)."""
    return key in NUMERIC_KEYS or key.startswith(tuple(k for k, _, _ in PLOTS.values() if k.endswith("/")))


NUMERIC_KEYS = {"heldout_success_rate", "best_branch_success_rate", "tokens_per_second", "seconds"}


def read_eval(path: Path) -> dict | None:
    """An eval file, or None when it is missing or damaged (the report then leaves its table out)."""
    value = read_json(path)
    return value if value is not None and "team_success_rate" in value else None


def quarter_means(rows: list[dict], key: str) -> tuple[float, float]:
    """Mean of `key` over the first and the last quarter of the steps (at least one step each).

    >>> quarter_means([{"s": v} for v in [0, 0, 1, 1]], "s")
    (0.0, 1.0)
    """
    q = max(1, len(rows) // 4)
    first, last = rows[:q], rows[-q:]
    return sum(r[key] for r in first) / len(first), sum(r[key] for r in last) / len(last)


def agents_of(rows: list[dict]) -> list[str]:
    return sorted(k.split("/", 1)[1] for k in (rows[0] if rows else {}) if k.startswith("reward/"))


def metric_series(rows: list[dict], key: str) -> Series:
    """One series per agent for a `prefix/` key, else one series for a plain key (sampled success added).

    >>> metric_series([{"step": 1, "loss/a": 0.5}, {"step": 2, "loss/a": 0.25}], "loss/")
    {'a': ([1, 2], [0.5, 0.25])}
    """
    steps = [r["step"] for r in rows]
    if key.endswith("/"):
        agents = sorted(k.removeprefix(key) for k in (rows[0] if rows else {}) if k.startswith(key))
        return {a: (steps, [r[key + a] for r in rows]) for a in agents if all(key + a in r for r in rows)}
    if key == "team_success_rate":
        return success_series(rows)
    return {key: (steps, [r[key] for r in rows])} if rows and key in rows[0] else {}


HELDOUT = "held-out, greedy, from step 0 (95% interval)"
SUCCESS_SERIES = {  # metrics.jsonl key -> legend (docs/metrics.md defines each)
    "team_success_rate": "training, on-policy episodes",
    "best_branch_success_rate": "training, tree's best-of-K branch",
}


def success_series(rows: list[dict]) -> Series:
    """The training success curves the metrics hold (the held-out curve comes from `curves`).

    >>> success_series([{"step": 1, "team_success_rate": 0.5}, {"step": 2, "team_success_rate": 1.0}])
    {'training, on-policy episodes': ([1, 2], [0.5, 1.0])}
    """
    series = {}
    for key, label in SUCCESS_SERIES.items():
        points = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
        if points:
            series[label] = ([s for s, _ in points], [v for _, v in points])
    return series


def heldout_points(rows: list[dict], spec: dict, before: dict | None, after: dict | None) -> tuple[str, list]:
    """(legend, points) of the held-out curve: step 0 and every `train.eval_every` point; a run that scored held-out
    problems only before and after training gets those two points, over every held-out problem."""
    subset = section(spec, "train").get("eval_subset")
    points = curves.heldout_curve(rows, before, subset if isinstance(subset, int) else None)
    if points:
        return HELDOUT, points
    last = rows[-1]["step"] if rows else 0
    return "held-out, greedy: before and after training (95% interval)", curves.before_after(before, after, last)


def kl_measured(rows: list[dict], spec: dict) -> bool:
    """KL is computed only with `algorithm.kl_coef` > 0; with 0 the logged kl/<agent> is a placeholder 0, not a
    measurement. A spec that does not say: measured when any value is not 0."""
    coef = section(spec, "algorithm").get("kl_coef")
    if isinstance(coef, int | float):
        return coef > 0
    return any(v for r in rows for k, v in r.items() if k.startswith("kl/"))


def run_plots(rows: list[dict], spec: dict, before: dict | None, after: dict | None) -> tuple[dict[str, bytes], list[str]]:
    """PNG per curve the run measured, and a sentence per panel left out saying why."""
    pngs, left_out = {}, []
    for stem, (key, title, ylabel) in PLOTS.items():
        if stem == "kl" and not kl_measured(rows, spec):
            left_out.append("KL to the base is not drawn: algorithm.kl_coef is 0, so it was not computed.")
            continue
        series, bands = metric_series(rows, key), {}
        if stem == "team_success":
            label, points = heldout_points(rows, spec, before, after)
            if points:
                steps, rates, band = curves.series(points)
                series, bands = {label: (steps, rates), **series}, {label: band}
        if series:
            pngs[stem] = line_plot(series, title, ylabel, bands=bands, rate=stem == "team_success")
    return pngs, left_out


# --- tables -----------------------------------------------------------------------------------
def eval_rows(before: dict, after: dict) -> list[list]:
    """Rows of the before/after held-out table; keys present in either eval."""
    rows = [
        ["team success rate", before["team_success_rate"], after["team_success_rate"]],
        ["95% interval", _interval(before), _interval(after)],
        ["mean attempts to success", before["mean_attempts_to_success"], after["mean_attempts_to_success"]],
        ["mean turns", before.get("mean_turns"), after.get("mean_turns")],
    ]
    extra = sorted(k for k in {**before, **after} if k.startswith(("reward/", "action_logprob/", "tool_call_validity/")))
    rows += [[k, before.get(k), after.get(k)] for k in extra]
    rows += [
        ["episodes", before["episodes"], after["episodes"]],
        ["tokens generated", before["tokens_generated"], after["tokens_generated"]],
    ]
    return rows


def _interval(ev: dict) -> str | None:
    ci = ev.get("team_success_ci")
    return f"[{ci[0]:.2f}, {ci[1]:.2f}]" if ci else None


def step_rows(rows: list[dict]) -> tuple[list[str], list[list]]:
    """The per-step table; a column the run never measured (no held-out curve, no tree) is left out."""
    agents = agents_of(rows)
    columns = [
        ("step", lambda r: r["step"]),
        ("held-out success", lambda r: r.get("heldout_success_rate")),
        ("team success", lambda r: r["team_success_rate"]),
        ("best-of-K success", lambda r: r.get("best_branch_success_rate")),
        *((f"reward/{a}", lambda r, a=a: r.get(f"reward/{a}")) for a in agents),
        ("tokens/s", lambda r: f"{r.get('tokens_per_second') or 0.0:.1f}"),
        ("seconds", lambda r: r.get("seconds")),
    ]
    kept = [(name, cell) for name, cell in columns if any(cell(r) is not None for r in rows)]
    return [name for name, _ in kept], [[cell(r) for _, cell in kept] for r in rows]


def training_summary(rows: list[dict]) -> str:
    first, last = quarter_means(rows, "team_success_rate")
    tps = sum(r.get("tokens_per_second") or 0.0 for r in rows) / len(rows)  # null: not measured that step
    return (
        f"Training team success rate, first quarter of steps {first:.3f} -> last quarter {last:.3f} "
        f"({(last - first) * 100:+.1f} points). Mean {tps:.1f} generated tokens/s; "
        f"{sum(r.get('seconds') or 0.0 for r in rows):.0f} s in {len(rows)} steps."
    )


# --- the report ---------------------------------------------------------------------------------
def compute_dtypes(run_dir: Path) -> str | None:
    """One line: the dtype each base computed in and why (resolved.json, written by train); None for older runs."""
    models = (read_json(run_dir / "resolved.json") or {}).get("models")
    if not isinstance(models, dict) or not models:
        return None
    parts = [f"{name}: {m.get('dtype')} ({m.get('why')})" for name, m in sorted(models.items()) if isinstance(m, dict)]
    return "Compute dtype of the bases (LoRA weights and log-softmax in float32): " + "; ".join(parts) + "."


def header_md(items: list[tuple[str, str]]) -> list[str]:
    return [f"- **{label}:** {text}" for label, text in items]


def header_html(items: list[tuple[str, str]]) -> str:
    rows = "".join(f"<tr><th>{html.escape(label)}</th><td>{html.escape(text)}</td></tr>" for label, text in items)
    return f'<table class="header">{rows}</table>'


def write_report(run_dir: Path) -> Path:
    """Write report.md, report.html and plots/*.png for a run directory; returns report.md's path."""
    run_dir = Path(run_dir)
    rows, spec = read_metrics(run_dir), read_spec(run_dir)
    before, after = read_eval(run_dir / "eval_before.json"), read_eval(run_dir / "eval_after.json")
    pngs, left_out = run_plots(rows, spec, before, after)
    named = spec.get("name") if spec.get("name") not in (None, run_dir.name) else None  # compare's runs are seed0, ...
    title = f"Run report: {run_dir.name}" + (f" ({named})" if named else "")
    items, said = header_items(run_dir, spec), summary(before, after, len(rows))
    md = [f"# {title}", "", f"**{said}**", "", *header_md(items), ""]
    body = [f"<h1>{html.escape(title)}</h1>", f"<p><strong>{html.escape(said)}</strong></p>", header_html(items)]
    if before and after:
        headers, table = ["held-out (greedy)", "before", "after"], eval_rows(before, after)
        md += ["## Held-out problems", "", *md_table(headers, table), ""]
        body.append(f"<h2>Held-out problems</h2>{html_table(headers, table)}")
    if rows:
        said = " ".join([training_summary(rows), *left_out])
        md += ["## Training", "", said, "", *(f"![{s}](plots/{s}.png)" for s in pngs), ""]
        body.append(f"<h2>Training</h2><p>{html.escape(said)}</p>{html_images(pngs)}")
        headers, table = step_rows(rows)
        md += ["### Per step", "", *md_table(headers, table), ""]
        body.append(f"<h3>Per step</h3>{html_table(headers, table)}")
    md += samples_md(before, after)
    body.append(samples_html(before, after))
    path = run_dir / "report.md"
    files = {run_dir / "plots" / f"{stem}.png": png for stem, png in pngs.items()}
    files[run_dir / "report.html"] = html_page(title, "\n".join(body))
    files[path] = "\n".join(md) + "\n"
    try:
        if pngs:
            (run_dir / "plots").mkdir(exist_ok=True)
        write_files(files)
    except OSError as e:
        raise UserError(
            f"{run_dir}: cannot write the report ({e.strerror or e}); free disk space, then run `pettingllms report {run_dir}`"
        ) from None
    return path
