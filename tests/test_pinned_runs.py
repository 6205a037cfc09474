"""Behaviour pinned across refactors (issue 31): short tiny-model runs of the main code paths give the metrics and
adapters recorded in tests/data/pinned_runs.json.

Each case trains 2 steps on one thread, so on CPU the figures are reproducible (test_determinism.py). Metrics are
compared key by key (wall-clock fields left out) and adapters by per-tensor fingerprints (sum, sum of squares and an
index-weighted sum), all to a relative 1e-5: a change in what is sampled, rewarded or updated moves them far more.

A change that is meant to change behaviour regenerates the file, and its commit says why:
    PETTINGLLMS_PIN=1 .venv/bin/python -m pytest tests/test_pinned_runs.py
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from unittest import mock

import pytest
import torch
from rich.console import Console
from safetensors.torch import load_file

from pettingllms_cli.spec import load_spec
from pettingllms_cli.training.loop import WALL_CLOCK_KEYS, train

ROOT = Path(__file__).resolve().parents[1]
PINNED = ROOT / "tests" / "data" / "pinned_runs.json"
TINY = ["train.steps=2", "train.checkpoint_every=2", "env.eval_problems=2", "train.max_new_tokens=6"]
SMOL_AS_TINY = ["models.smol.source=tiny-llama", "algorithm.lr=1e-2", "train.eval_every=1", "train.eval_subset=2"]

# case -> (experiment, overrides): the tree and parallel rollouts, deferred roles with play-outs, difference credit,
# balanced verdicts, role rotation with distillation, the intent round, two-role function selection.
CASES = {
    "smoke_tree": ("smoke.yaml", TINY),
    "team_balanced": (
        "showcase_math_team_balanced.yaml",
        [*TINY, *SMOL_AS_TINY, "env.max_turns=2", "algorithm.group_size=4", "train.problems_per_step=2"],
    ),
    "team_difference_balanced": (
        "showcase_math_team_difference_balanced.yaml",
        [*TINY, *SMOL_AS_TINY, "env.max_turns=2"],
    ),
    "team_rotate_distill": (
        "showcase_math_team_rotate_distill.yaml",
        [*TINY, *SMOL_AS_TINY, "env.max_turns=2", "distill.0.every=1"],
    ),
    "parallel_intents": (
        "coordination.yaml",
        [*TINY, *SMOL_AS_TINY, "train.problems_per_step=2", "coordination.intent_tokens=4", "env.options.format_bonus=0.2"],
    ),
    "select_team_retry": (
        "showcase_select_team_retry.yaml",
        [*TINY, *SMOL_AS_TINY, "train.problems_per_step=2", "algorithm.scale_rewards=none", "algorithm.update_epochs=2"],
    ),
}

# Cases whose adapters must move in 2 steps. A random tiny model earns the team layouts no reward spread (every
# branch fails alike), so those pin what is sampled, played on and scored, and that nothing moved.
MOVES = {"smoke_tree", "parallel_intents"}

pytestmark = pytest.mark.usefixtures("one_thread")


def run_case(name: str, run_dir: Path) -> dict:
    experiment, overrides = CASES[name]
    spec = load_spec(ROOT / "experiments" / experiment, overrides)
    with mock.patch("pettingllms_cli.training.loop.write_report"):  # plots are not under test
        train(spec, run_dir, console=Console(quiet=True))
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {
        "metrics": [{k: v for k, v in r.items() if k not in WALL_CLOCK_KEYS} for r in rows],
        "adapters": adapter_fingerprints(run_dir / "checkpoints" / "step_2"),
    }


def adapter_fingerprints(folder: Path) -> dict[str, list[float]]:
    prints = {}
    for adapter in sorted(p for p in folder.iterdir() if p.is_dir()):
        for key, tensor in sorted(load_file(adapter / "adapter_model.safetensors").items()):
            x = tensor.double().flatten()
            weights = torch.arange(1, len(x) + 1, dtype=torch.float64) / len(x)
            prints[f"{adapter.name}/{key}"] = [x.sum().item(), (x * x).sum().item(), (x * weights).sum().item()]
    return prints


def same(pinned, got, where: str = "") -> list[str]:
    """Where `got` differs from `pinned`: floats to a relative 1e-5, everything else exactly."""
    if isinstance(pinned, dict) and isinstance(got, dict):
        if pinned.keys() != got.keys():
            return [f"{where}: keys {sorted(set(pinned) ^ set(got))} added or lost"]
        return [d for k in pinned for d in same(pinned[k], got[k], f"{where}.{k}")]
    if isinstance(pinned, list) and isinstance(got, list):
        if len(pinned) != len(got):
            return [f"{where}: {len(got)} items, pinned {len(pinned)}"]
        return [d for i, (p, g) in enumerate(zip(pinned, got, strict=True)) for d in same(p, g, f"{where}[{i}]")]
    if isinstance(pinned, float) or isinstance(got, float):
        ok = isinstance(got, int | float) and math.isclose(pinned, got, rel_tol=1e-5, abs_tol=1e-8)
        return [] if ok else [f"{where}: {got!r}, pinned {pinned!r}"]
    return [] if pinned == got else [f"{where}: {got!r}, pinned {pinned!r}"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_pinned_run_gives_the_pinned_metrics_and_adapters(name: str, tmp_path: Path) -> None:
    got = run_case(name, tmp_path / name)
    moved = any(abs(v[1]) > 0 for k, v in got["adapters"].items() if "lora_B" in k)
    assert moved == (name in MOVES), f"{name}: adapters {'moved' if moved else 'never moved'}"
    pinned = json.loads(PINNED.read_text()) if PINNED.is_file() else {}
    if os.environ.get("PETTINGLLMS_PIN") == "1":
        pinned[name] = got
        PINNED.write_text(json.dumps(pinned, indent=1, sort_keys=True) + "\n")
        return
    assert name in pinned, f"{name} is not pinned: run once with PETTINGLLMS_PIN=1"
    differences = same(pinned[name], json.loads(json.dumps(got)))
    assert not differences, f"{name} changed behaviour ({len(differences)} values): " + "; ".join(differences[:8])


def test_the_comparison_catches_a_changed_value() -> None:
    pinned = {"metrics": [{"loss": 0.5, "actions": 4}], "adapters": {"a/lora_B": [1.0, 2.0, 3.0]}}
    assert same(pinned, json.loads(json.dumps(pinned))) == []
    assert same(pinned, {"metrics": [{"loss": 0.5001, "actions": 4}], "adapters": pinned["adapters"]})
    assert same(pinned, {"metrics": [{"loss": 0.5, "actions": 5}], "adapters": pinned["adapters"]})
    assert same(pinned, {"metrics": [{"loss": 0.5}], "adapters": pinned["adapters"]})
