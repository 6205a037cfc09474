"""report.md: held-out success before and after training, and the per-step curves as a table."""

from __future__ import annotations

import json
from pathlib import Path


def read_metrics(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def quarter_means(rows: list[dict], key: str) -> tuple[float, float]:
    """Mean of `key` over the first and the last quarter of the steps (at least one step each)."""
    q = max(1, len(rows) // 4)
    first, last = rows[:q], rows[-q:]
    return sum(r[key] for r in first) / len(first), sum(r[key] for r in last) / len(last)


def write_report(run_dir: Path) -> Path:
    rows = read_metrics(run_dir)
    agents = sorted(k.split("/", 1)[1] for k in (rows[0] if rows else {}) if k.startswith("reward/"))
    lines = [f"# Run report: {run_dir.name}", ""]
    before, after = (run_dir / "eval_before.json"), (run_dir / "eval_after.json")
    if before.is_file() and after.is_file():
        b, a = json.loads(before.read_text()), json.loads(after.read_text())
        lines += [
            "## Held-out problems (greedy)", "",
            "| | before | after |", "|---|---|---|",
            f"| team success rate | {b['team_success_rate']:.3f} | {a['team_success_rate']:.3f} |",
            f"| mean attempts to success | {b['mean_attempts_to_success']:.2f} | {a['mean_attempts_to_success']:.2f} |",
            f"| episodes | {b['episodes']} | {a['episodes']} |", "",
        ]
    if rows:
        first, last = quarter_means(rows, "team_success_rate")
        tps = sum(r["tokens_per_second"] for r in rows) / len(rows)
        lines += [
            "## Training", "",
            f"Training team success rate, first quarter of steps {first:.3f} -> last quarter {last:.3f} "
            f"({(last - first) * 100:+.1f} points). Mean {tps:.1f} generated tokens/s; "
            f"{sum(r['seconds'] for r in rows):.0f} s in {len(rows)} steps.", "",
            "| step | team success | sampled success | " + " | ".join(f"reward/{a}" for a in agents) + " | tokens/s |",
            "|---" * (4 + len(agents)) + "|",
        ]
        for r in rows:
            rewards = " | ".join(f"{r[f'reward/{a}']:.3f}" for a in agents)
            lines.append(
                f"| {r['step']} | {r['team_success_rate']:.3f} | {r['sample_success_rate']:.3f} | {rewards} | {r['tokens_per_second']:.1f} |"
            )
    path = run_dir / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
