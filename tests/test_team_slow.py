"""Real weights: one training step of experiments/hetero.yaml (SmolLM2 + Gemma-3-270M) and experiments/qlora.yaml (NF4)."""

from __future__ import annotations

import json
import math

import pytest

from pettingllms_cli.spec import load_spec
from pettingllms_cli.training.loop import train
from tests.conftest import EXPERIMENTS

pytestmark = pytest.mark.slow
SMALL = ["train.steps=1", "train.problems_per_step=2", "algorithm.group_size=2", "train.max_new_tokens=6", "env.eval_problems=2"]


def _one_step(name: str, tmp_path, extra: list[str]) -> dict:
    spec = load_spec(EXPERIMENTS / name, SMALL + extra)
    run_dir = train(spec, tmp_path / "run")
    row = json.loads((run_dir / "metrics.jsonl").read_text())
    assert row["step"] == 1 and row["tokens_generated"] > 0
    assert all(math.isfinite(row[f"loss/{a}"]) for a in spec.agents)
    assert len(row["roles"]) == 2
    return row


def test_hetero_trains_one_step(tmp_path):
    row = _one_step("hetero.yaml", tmp_path, ["distill.0.every=1"])
    assert {"model_memory_mb/caller", "model_memory_mb/verifier"} <= row.keys()  # two bases: SmolLM2 and Gemma


def test_qlora_trains_one_step(tmp_path):
    row = _one_step("qlora.yaml", tmp_path, [])
    assert row["model_memory_mb/smol"] < 200  # 135M parameters in 4 bit (float32 would be ~540 MB)
