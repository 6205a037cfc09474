"""What a report opens with: the run header (model, dtype, spec, commit, date) and one sentence saying what happened.

Everything here is read from the run directory: spec.yaml (the resolved spec), resolved.json (the dtype each base
computed in, and the code's commit and start time where the run recorded them) and the eval files. A file that is
missing or damaged leaves its item as "unknown", never a traceback.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import yaml

from pettingllms_cli.jsonio import read_json


def read_spec(run_dir: Path) -> dict:
    """spec.yaml as plain data; {} when it is missing or not a mapping (the report then says less)."""
    try:
        spec = yaml.safe_load((run_dir / "spec.yaml").read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):
        return {}
    return spec if isinstance(spec, dict) else {}


def section(spec: dict, key: str) -> dict:
    value = spec.get(key)
    return value if isinstance(value, dict) else {}


def models_item(spec: dict, resolved: dict) -> str:
    """Each base: its source, and the dtype it computed in with why.

    >>> models_item({"models": {"smol": {"source": "smollm2-135m-instruct", "quantization": "none"}}},
    ...             {"models": {"smol": {"dtype": "float32", "why": "auto: no bf16 unit"}}})
    'smol = smollm2-135m-instruct, float32 (auto: no bf16 unit)'
    """
    computed = section(resolved, "models")
    parts = []
    for name, model in sorted(section(spec, "models").items()):
        model = model if isinstance(model, dict) else {}
        how = computed.get(name) if isinstance(computed.get(name), dict) else {}
        dtype = f"{how['dtype']} ({how.get('why')})" if how.get("dtype") else f"dtype {model.get('dtype', 'unknown')}"
        quant = f", {model['quantization']}" if model.get("quantization") not in (None, "none") else ""
        parts.append(f"{name} = {model.get('source', '?')}{quant}, {dtype}")
    return "; ".join(parts) or "unknown (no spec.yaml)"


def agents_item(spec: dict) -> str:
    """Who plays which role, with each agent's LoRA.

    >>> agents_item({"agents": {"caller": {"model": "smol", "roles": ["tool_caller"], "lora": {"r": 16, "alpha": 32}}},
    ...              "specialization": "per_agent"})
    'caller (tool_caller; smol + LoRA r=16, alpha=32); specialization per_agent'
    """
    parts = []
    for name, agent in sorted(section(spec, "agents").items()):
        agent = agent if isinstance(agent, dict) else {}
        lora = agent.get("lora") if isinstance(agent.get("lora"), dict) else None
        adapter = f" + LoRA r={lora.get('r')}, alpha={lora.get('alpha'):g}" if lora and lora.get("alpha") else ""
        roles = ", ".join(map(str, agent.get("roles") or []))
        parts.append(f"{name} ({roles}; {agent.get('model', '?')}{adapter})")
    return "; ".join(parts) + (f"; specialization {spec['specialization']}" if spec.get("specialization") else "")


def spec_item(spec: dict) -> str:
    env, algo, train = section(spec, "env"), section(spec, "algorithm"), section(spec, "train")
    if not spec:
        return "unknown (no spec.yaml)"
    return (
        f"{spec.get('name', '?')}: {env.get('name', '?')} (layout {env.get('layout', '?')}), "
        f"{algo.get('name', '?')} {algo.get('rollout', '')} K={algo.get('group_size', '?')}, "
        f"{train.get('steps', '?')} steps of {train.get('problems_per_step', '?')} problems, lr {algo.get('lr', '?')}, "
        f"kl_coef {algo.get('kl_coef', '?')}, seed {spec.get('seed', '?')}"
    )


def provenance_items(resolved: dict) -> list[tuple[str, str]]:
    """Commit and start time as the run recorded them (training/provenance.py)."""
    prov = section(resolved, "provenance")
    commit = prov.get("commit") or "unknown (not a git checkout, or the run predates this record)"
    commit = commit.replace("+changes", " with uncommitted changes")  # provenance.git_commit's mark
    version = f" (pettingllms {prov['version']})" if prov.get("version") else ""
    return [("Commit", f"{commit}{version}"), ("Started", prov.get("started") or "unknown")]


def header_items(run_dir: Path, spec: dict) -> list[tuple[str, str]]:
    """(label, text) lines of the run header."""
    resolved = read_json(run_dir / "resolved.json") or {}
    resolved = resolved if isinstance(resolved, dict) else {}
    written = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return [
        ("Model", models_item(spec, resolved)),
        ("Agents", agents_item(spec) or "unknown"),
        ("Spec", spec_item(spec)),
        *provenance_items(resolved),
        ("Report written", written),
    ]


def _score(ev: dict) -> str:
    return f"{ev['successes']}/{ev['episodes']} ({ev['team_success_rate']:.2f})"


def summary(before: dict | None, after: dict | None, steps: int) -> str:
    """One sentence: what training did to held-out success, or what is missing.

    >>> ev = lambda s, n, ci: {"successes": s, "episodes": n, "team_success_rate": s / n, "team_success_ci": ci}
    >>> summary(ev(11, 24, [0.28, 0.65]), ev(24, 24, [0.86, 1.0]), 16)  # doctest: +NORMALIZE_WHITESPACE
    'Held-out success rose from 11/24 (0.46) to 24/24 (1.00) over 16 training steps (greedy, on problems training
    never draws; 95% intervals [0.28, 0.65] and [0.86, 1.00], apart).'
    """
    if not before or not after:
        if not steps:
            return "No training step is logged yet and no held-out score was written."
        missing = "eval_after.json" if before else "eval_before.json and eval_after.json"
        return (
            f"Training logged {steps} steps; held-out success before and after training is not known yet ({missing} "
            "missing: a stopped run writes it when resumed with --resume)."
        )
    b, a = before["team_success_rate"], after["team_success_rate"]
    moved = f"rose from {_score(before)} to" if a > b else f"fell from {_score(before)} to" if a < b else "stayed at"
    intervals = ""
    if before.get("team_success_ci") and after.get("team_success_ci"):
        (lo1, hi1), (lo2, hi2) = before["team_success_ci"], after["team_success_ci"]
        apart = "apart" if hi1 < lo2 or hi2 < lo1 else "overlapping: not a clear change"
        intervals = f"; 95% intervals [{lo1:.2f}, {hi1:.2f}] and [{lo2:.2f}, {hi2:.2f}], {apart}"
    return (
        f"Held-out success {moved} {_score(after)} over {steps} training steps "
        f"(greedy, on problems training never draws{intervals})."
    )
