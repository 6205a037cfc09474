"""A run's report: report.md (plots as PNG files beside it) and a self-contained report.html.

Contents: held-out success before and after training (with 95% intervals), the training curves
(team success, per-agent reward, loss, KL, entropy), the per-step table and a few sample
episodes rendered as a conversation.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path

from pettingllms_cli.analysis.plots import Series, html_images, html_page, html_table, line_plot, md_table, write_files
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


SUCCESS_SERIES = {  # metrics.jsonl key -> legend (docs/metrics.md defines each)
    "heldout_success_rate": "held-out, greedy (train.eval_every)",
    "team_success_rate": "training, on-policy episodes",
    "best_branch_success_rate": "training, tree's best-of-K branch",
}


def success_series(rows: list[dict]) -> Series:
    """The success curves the metrics hold; held-out points exist only at the steps it was scored.

    >>> success_series([{"step": 1, "team_success_rate": 0.5}, {"step": 2, "team_success_rate": 1.0,
    ...                 "heldout_success_rate": 0.25}])["held-out, greedy (train.eval_every)"]
    ([2], [0.25])
    """
    series = {}
    for key, label in SUCCESS_SERIES.items():
        points = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
        if points:
            series[label] = ([s for s, _ in points], [v for _, v in points])
    return series


def run_plots(rows: list[dict]) -> dict[str, bytes]:
    """PNG per curve that the metrics hold."""
    pngs = {}
    for stem, (key, title, ylabel) in PLOTS.items():
        series = metric_series(rows, key)
        if series:
            pngs[stem] = line_plot(series, title, ylabel)
    return pngs


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
    agents = agents_of(rows)
    headers = ["step", "held-out success", "team success", "best-of-K success", *(f"reward/{a}" for a in agents)]
    headers += ["tokens/s", "seconds"]
    body = [
        [
            r["step"],
            r.get("heldout_success_rate"),
            r["team_success_rate"],
            r.get("best_branch_success_rate"),
            *(r.get(f"reward/{a}") for a in agents),
            f"{r.get('tokens_per_second') or 0.0:.1f}",
            r.get("seconds"),
        ]
        for r in rows
    ]
    return headers, body


def training_summary(rows: list[dict]) -> str:
    first, last = quarter_means(rows, "team_success_rate")
    tps = sum(r.get("tokens_per_second") or 0.0 for r in rows) / len(rows)  # null: not measured that step
    return (
        f"Training team success rate, first quarter of steps {first:.3f} -> last quarter {last:.3f} "
        f"({(last - first) * 100:+.1f} points). Mean {tps:.1f} generated tokens/s; "
        f"{sum(r.get('seconds') or 0.0 for r in rows):.0f} s in {len(rows)} steps."
    )


# --- episodes as conversations -------------------------------------------------------------------
def episode_messages(state: dict) -> list[tuple[str, str, list[str]]]:
    """(speaker, text, notes) per action; notes say which tool ran with what result, or the answer.

    >>> episode_messages({"transcript": [{"turn": 0, "role": "caller", "text": "x", "tool_call": "1+1 = 2"}]})
    [('turn 1 · caller', 'x', ['tool_call: 1+1 = 2'])]
    """
    out = []
    for entry in state.get("transcript", []):
        notes = [f"{k}: {v}" for k, v in entry.items() if k not in ("turn", "role", "text")]
        out.append((f"turn {entry.get('turn', 0) + 1} · {entry.get('role', '?')}", str(entry.get("text", "")), notes))
    return out


def episode_header(state: dict) -> str:
    problem = state.get("problem", {})
    verdict = "solved" if state.get("success") else "not solved"
    return f"{problem.get('id', '?')}: {problem.get('question', '')} (gold answer {problem.get('answer')}; {verdict})"


def episodes_md(states: list[dict]) -> list[str]:
    lines = []
    for state in states:
        lines += [f"**{episode_header(state)}**", ""]
        for speaker, text, notes in episode_messages(state):
            quoted = text.replace("`", "'")  # keep the inline code span closed
            lines += [f"- *{speaker}*: `{quoted}`"] + [f"  - {n}" for n in notes]
        lines.append("")
    return lines


def episodes_html(states: list[dict]) -> str:
    parts = []
    for state in states:
        cls = "ok" if state.get("success") else "fail"
        msgs = "".join(
            f'<div class="msg"><span class="role">{html.escape(speaker)}</span><pre>{html.escape(text)}</pre>'
            + "".join(f'<div class="note">{html.escape(n)}</div>' for n in notes)
            + "</div>"
            for speaker, text, notes in episode_messages(state)
        )
        parts.append(f'<div class="episode"><p class="{cls}">{html.escape(episode_header(state))}</p>{msgs}</div>')
    return "".join(parts)


# --- the report ---------------------------------------------------------------------------------
def compute_dtypes(run_dir: Path) -> str | None:
    """One line: the dtype each base computed in and why (resolved.json, written by train); None for older runs."""
    models = (read_json(run_dir / "resolved.json") or {}).get("models")
    if not isinstance(models, dict) or not models:
        return None
    parts = [f"{name}: {m.get('dtype')} ({m.get('why')})" for name, m in sorted(models.items()) if isinstance(m, dict)]
    return "Compute dtype of the bases (LoRA weights and log-softmax in float32): " + "; ".join(parts) + "."


def write_report(run_dir: Path) -> Path:
    """Write report.md, report.html and plots/*.png for a run directory; returns report.md's path."""
    run_dir = Path(run_dir)
    rows = read_metrics(run_dir)
    before, after = read_eval(run_dir / "eval_before.json"), read_eval(run_dir / "eval_after.json")
    pngs = run_plots(rows)
    md, body = [f"# Run report: {run_dir.name}", ""], [f"<h1>Run report: {html.escape(run_dir.name)}</h1>"]
    computed = compute_dtypes(run_dir)
    if computed:
        md += [computed, ""]
        body.append(f"<p>{html.escape(computed)}</p>")
    if before and after:
        headers, table = ["held-out (greedy)", "before", "after"], eval_rows(before, after)
        md += ["## Held-out problems", "", *md_table(headers, table), ""]
        body.append(f"<h2>Held-out problems</h2>{html_table(headers, table)}")
    if rows:
        summary = training_summary(rows)
        md += ["## Training", "", summary, "", *(f"![{s}](plots/{s}.png)" for s in pngs), ""]
        body.append(f"<h2>Training</h2><p>{html.escape(summary)}</p>{html_images(pngs)}")
        headers, table = step_rows(rows)
        md += ["### Per step", "", *md_table(headers, table), ""]
        body.append(f"<h3>Per step</h3>{html_table(headers, table)}")
    samples = (after or before or {}).get("transcripts", [])
    if samples:
        md += ["## Sample episodes (held-out, after training)" if after else "## Sample episodes", "", *episodes_md(samples)]
        body.append(f"<h2>Sample episodes</h2>{episodes_html(samples)}")
    path = run_dir / "report.md"
    files = {run_dir / "plots" / f"{stem}.png": png for stem, png in pngs.items()}
    files[run_dir / "report.html"] = html_page(f"Run report: {run_dir.name}", "\n".join(body))
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
