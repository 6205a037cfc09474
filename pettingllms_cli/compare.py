"""`pettingllms compare`: train several specs on the same budget and seeds, score them on the same
held-out problems, and write compare.md / compare.json / compare.html.

Runs live in `<out>/<spec name>/seed<k>`. A run whose spec.yaml equals the resolved spec and
that finished is reused (not retrained); an unfinished one is resumed; a stale one (spec
changed) is replaced. Held-out scores are cached per run in `compare_eval.json`, keyed by the
problems and the checkpoint, so a second call neither retrains nor re-scores.
"""

from __future__ import annotations

import hashlib
import html
import json
from pathlib import Path

import yaml
from rich.console import Console
from rich.table import Table

from pettingllms_cli import distributed
from pettingllms_cli.envs import Problem
from pettingllms_cli.errors import UserError
from pettingllms_cli.plots import fmt, html_images, html_page, html_table, line_plot, md_table
from pettingllms_cli.spec import Experiment, load_spec
from pettingllms_cli.stats import convergence_step, mean_interval, ratio, wilson_interval

BUDGET = ("train.steps", "train.problems_per_step", "algorithm.group_size", "train.max_new_tokens", "env.max_turns")


# --- the specs ------------------------------------------------------------------------------------
def field(spec: Experiment, dotted: str):
    node = spec
    for key in dotted.split("."):
        node = getattr(node, key)
    return node


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
    if allow_unequal:
        return
    for key in BUDGET:
        values = [field(s, key) for s in specs]
        if len(set(values)) > 1:
            listed = ", ".join(f"{p}: {v}" for p, v in zip(paths, values, strict=True))
            raise UserError(f"unequal budgets, {key} differs ({listed}); make them equal or pass --allow-unequal")


def seeded(path: Path, seed: int, max_steps: int | None) -> Experiment:
    overrides = [f"seed={seed}"] + ([f"train.steps={max_steps}"] if max_steps is not None else [])
    return load_spec(path, overrides)


# --- one run: train or reuse, then score ------------------------------------------------------------
def run_state(spec: Experiment, run_dir: Path) -> str:
    """`done` (reuse), `partial` (resume), `stale` (replace) or `new`."""
    from pettingllms_cli.checkpoint import complete_checkpoints

    spec_file = run_dir / "spec.yaml"
    if not spec_file.is_file():
        return "stale" if run_dir.exists() and any(run_dir.iterdir()) else "new"
    saved = yaml.safe_load(spec_file.read_text())
    now = spec.model_dump(mode="json")
    if saved != now:
        return "stale"
    steps = [s for s, _ in complete_checkpoints(run_dir)]
    finished = spec.train.steps in steps and (run_dir / "eval_after.json").is_file()
    return "done" if finished else ("partial" if steps else "stale")


def ensure_run(spec: Experiment, run_dir: Path, console: Console) -> str:
    """Train the run unless a finished one with this exact spec exists; returns what happened."""
    from pettingllms_cli.train import train

    state = distributed.on_main(run_state, spec, run_dir)  # one decision for all ranks: rank 0 may be writing run_dir
    if state == "done":
        console.print(f"reusing {run_dir} (same spec and seed, finished)")
        return "reused"
    console.print(
        f"{'resuming' if state == 'partial' else 'training'} {run_dir}"
        + (" (spec changed)" if state == "stale" and run_dir.exists() else "")
    )
    train(spec, run_dir, resume=state == "partial", overwrite=state == "stale", console=console)
    return "resumed" if state == "partial" else "trained"


def problems_key(problems: list[Problem], checkpoint: Path) -> str:
    """Identifies what a cached score was computed on: the problems and the checkpoint scored."""
    text = json.dumps([[p.id, p.question, str(p.answer)] for p in problems]) + str(checkpoint.name)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def train_eval(run_dir: Path, name: str, problems: list[Problem]) -> dict | None:
    """train's own eval_before/eval_after.json when it scored exactly these problems greedily (seed-0 runs)."""
    path = run_dir / name
    if not path.is_file():
        return None
    scored = json.loads(path.read_text())
    ids = [e.get("id") for e in scored.get("per_episode", [])]
    return scored if scored.get("decoding") == "greedy" and ids == [p.id for p in problems] else None


def score_run(spec: Experiment, run_dir: Path, problems: list[Problem]) -> dict:
    """Held-out scores of the untrained team and of the final checkpoint, cached in compare_eval.json."""
    from pettingllms_cli.checkpoint import latest_checkpoint, load_adapters
    from pettingllms_cli.evaluate import evaluate
    from pettingllms_cli.policy import Team
    from pettingllms_cli.rundir import write_json

    checkpoint = latest_checkpoint(run_dir)
    key = problems_key(problems, checkpoint)
    cache = run_dir / "compare_eval.json"
    cached = distributed.on_main(read_cache, cache, key)  # every rank skips scoring, or none does (scoring is collective)
    if cached is not None:
        return cached
    initial, final = train_eval(run_dir, "eval_before.json", problems), train_eval(run_dir, "eval_after.json", problems)
    if initial is None or final is None:  # train scored other problems: score these, same greedy evaluate
        team = Team(spec)
        initial = initial or evaluate(team, spec, problems, n_transcripts=1, score_actions=False)
        load_adapters(team, checkpoint)
        final = final or evaluate(team, spec, problems, n_transcripts=1, score_actions=False)
    scored = {"key": key, "checkpoint": str(checkpoint), "initial": initial, "final": final}
    if distributed.is_main():
        write_json(cache, scored)
    return scored


def read_cache(cache: Path, key: str) -> dict | None:
    """The cached scores when they were computed on the same problems and checkpoint, else None."""
    if not cache.is_file():
        return None
    try:
        cached = json.loads(cache.read_text())
    except json.JSONDecodeError:  # a cache cut short by a kill: score again
        return None
    return cached if cached.get("key") == key else None


def run_summary(spec: Experiment, run_dir: Path, status: str, scored: dict, threshold: float, window: int) -> dict:
    """One row of the per-run table, from metrics.jsonl and the held-out scores."""
    from pettingllms_cli.report import read_metrics

    rows = read_metrics(run_dir)
    curve = [r["team_success_rate"] for r in rows]
    return {
        "seed": spec.seed,
        "run_dir": str(run_dir),
        "status": status,
        "steps": len(rows),
        "initial_success": scored["initial"]["team_success_rate"],
        "final_success": scored["final"]["team_success_rate"],
        "final_successes": scored["final"]["successes"],
        "episodes": scored["final"]["episodes"],
        "initial_attempts": scored["initial"]["mean_attempts_to_success"],
        "final_attempts": scored["final"]["mean_attempts_to_success"],
        "convergence_step": convergence_step([r["step"] for r in rows], curve, threshold, window),
        "train_tokens": sum(r.get("tokens_generated", 0) for r in rows),
        "train_seconds": round(sum(r.get("seconds", 0.0) for r in rows), 3),
        "success_curve": curve,
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
    # Runs that never reach the threshold count as the whole budget (like unsolved episodes in attempts).
    censored = [r["convergence_step"] if r["convergence_step"] is not None else r["steps"] for r in runs]
    return {
        "spec": spec.name,
        "path": str(path),
        "layout": spec.env.layout,
        "agents": len(spec.agents),
        "seeds": len(runs),
        "initial_success": initial,
        "initial_success_half_width": initial_half,
        "final_success": final,
        "final_success_ci": final_ci,
        "ci_method": method,
        "mean_attempts": mean_interval([r["final_attempts"] for r in runs])[0],
        "convergence_step": sum(censored) / len(censored) if reached else None,
        "converged_seeds": len(reached),
        "train_tokens": mean_interval([float(r["train_tokens"]) for r in runs])[0],
        "train_seconds": mean_interval([r["train_seconds"] for r in runs])[0],
    }


def ratios(a: dict, b: dict) -> dict:
    """B relative to A: improvement factor, success gain, attempts ratio, convergence speed-up.

    >>> r = ratios({"spec": "a", "final_success": 0.2, "mean_attempts": 2.0, "convergence_step": 8.0},
    ...            {"spec": "b", "final_success": 0.5, "mean_attempts": 1.5, "convergence_step": 4.0})
    >>> round(r["improvement_factor"], 3), round(r["success_gain"], 3), r["attempts_ratio"], r["convergence_speedup"]
    (2.5, 0.3, 0.75, 2.0)
    """
    return {
        "pair": f"{b['spec']}/{a['spec']}",
        "improvement_factor": ratio(b["final_success"], a["final_success"]),
        "success_gain": b["final_success"] - a["final_success"],
        "attempts_ratio": ratio(b["mean_attempts"], a["mean_attempts"]),
        "convergence_speedup": ratio(a["convergence_step"], b["convergence_step"]),
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
) -> dict:
    """Train (or reuse) every spec x seed, score all on one held-out set, write the three files."""
    from pettingllms_cli.evaluate import eval_problems

    console = console or Console()
    if seeds < 1:
        raise UserError(f"--seeds {seeds}: need at least one seed")
    specs = load_arms(paths, max_steps)
    check_comparable(paths, specs, allow_unequal)
    base = specs[0]
    problems = eval_problems(base, "test", base.seed, episodes or base.env.eval_problems)  # one held-out set for all
    rows, runs_by_spec = [], {}
    for path, spec in zip(paths, specs, strict=True):
        runs = []
        for seed in range(seeds):
            run_spec = seeded(path, seed, max_steps)
            run_dir = out / spec.name / f"seed{seed}"
            status = ensure_run(run_spec, run_dir, console)
            runs.append(run_summary(run_spec, run_dir, status, score_run(run_spec, run_dir, problems), threshold, window))
        runs_by_spec[spec.name] = runs
        rows.append(spec_row(spec, path, runs))
    result = {
        "env": base.env.name,
        "held_out": {
            "data": base.env.data,
            "split": "test",
            "seed": base.seed,
            "problems": [p.id for p in problems],
            "decoding": "greedy",
        },
        "budget": {key: [field(s, key) for s in specs] for key in BUDGET},
        "seeds": list(range(seeds)),
        "convergence": {"metric": "team_success_rate (training)", "threshold": threshold, "window": window},
        "rows": rows,
        "ratios": [ratios(rows[0], row) for row in rows[1:]],
        "runs": runs_by_spec,
    }
    write_outputs(out, result)
    return result


# --- outputs -----------------------------------------------------------------------------------------------
ROW_HEADERS = [
    "spec",
    "layout",
    "agents",
    "seeds",
    "initial success",
    "final success",
    "95% CI",
    "mean attempts",
    "convergence step",
    "train tokens/seed",
    "train s/seed",
]
RATIO_HEADERS = ["B/A", "improvement factor", "success gain", "attempts ratio", "convergence speed-up"]
RUN_HEADERS = ["spec", "seed", "status", "initial success", "final success", "attempts", "convergence step", "tokens", "seconds"]


def row_cells(row: dict) -> list:
    ci = row["final_success_ci"]
    conv = row["convergence_step"]
    conv_cell = None if conv is None else f"{conv:.1f} ({row['converged_seeds']}/{row['seeds']} seeds)"
    return [
        row["spec"],
        row["layout"],
        row["agents"],
        row["seeds"],
        row["initial_success"],
        row["final_success"],
        f"[{ci[0]:.3f}, {ci[1]:.3f}]",
        row["mean_attempts"],
        conv_cell,
        round(row["train_tokens"]),
        f"{row['train_seconds']:.1f}",
    ]


def ratio_cells(r: dict) -> list:
    return [r["pair"], r["improvement_factor"], r["success_gain"], r["attempts_ratio"], r["convergence_speedup"]]


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
            r["train_tokens"],
            f"{r['train_seconds']:.1f}",
        ]
        for name, runs in result["runs"].items()
        for r in runs
    ]


def describe(result: dict) -> str:
    h, c = result["held_out"], result["convergence"]
    held_out = f"{len(h['problems'])} held-out problems ({h['data']}, split {h['split']}, seed {h['seed']}, {h['decoding']})"
    return (
        f"{result['env']}: {held_out}, seeds {result['seeds']}. Success is the share of held-out problems the team solves; "
        "the 95% interval is a t interval over seeds (Wilson over all episodes when there is one seed or all seeds agree). "
        f"Convergence: first step at which the {c['window']}-step mean of "
        f"training success reaches {c['threshold']} (seeds that never reach it count as the whole budget). "
        "Ratios are each spec over the first."
    )


def write_outputs(out: Path, result: dict) -> None:
    if not distributed.is_main():
        return  # rank 0 alone writes
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare.json").write_text(json.dumps(result, indent=2, default=str))
    title = "Compare: " + " vs ".join(r["spec"] for r in result["rows"])
    rows = [row_cells(r) for r in result["rows"]]
    ratio_rows = [ratio_cells(r) for r in result["ratios"]]
    md = [
        f"# {title}",
        "",
        describe(result),
        "",
        *md_table(ROW_HEADERS, rows),
        "",
        "## Ratios",
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
        f"<h1>{html.escape(title)}</h1><p>{html.escape(describe(result))}</p>{html_table(ROW_HEADERS, rows)}"
        f"<h2>Ratios</h2>{html_table(RATIO_HEADERS, ratio_rows)}<h2>Training curves</h2>{html_images(curve_plots(result))}"
        f"<h2>Runs</h2>{html_table(RUN_HEADERS, run_cells(result))}"
    )
    (out / "compare.html").write_text(html_page(title, body), encoding="utf-8")


def curve_plots(result: dict) -> dict[str, bytes]:
    """Training success per step, mean over seeds, one line per spec."""
    series = {}
    for name, runs in result["runs"].items():
        n = min(len(r["success_curve"]) for r in runs)
        if n:
            series[name] = (list(range(1, n + 1)), [sum(r["success_curve"][i] for r in runs) / len(runs) for i in range(n)])
    return {"success": line_plot(series, "Team success while training (mean over seeds)", "success rate")} if series else {}


def console_table(result: dict) -> Table:
    """The spec rows, narrowed to what fits a terminal (compare.md has every column)."""
    keep = [0, 4, 5, 6, 7, 8]  # spec, initial, final, CI, attempts, convergence
    table = Table(*(ROW_HEADERS[i] for i in keep), title="compare (held-out success)")
    for row in result["rows"]:
        cells = row_cells(row)
        table.add_row(*(fmt(cells[i]) for i in keep))
    return table


def ratios_table(result: dict) -> Table:
    table = Table(*RATIO_HEADERS)
    for r in result["ratios"]:
        table.add_row(*(fmt(c) for c in ratio_cells(r)))
    return table
