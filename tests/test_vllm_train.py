"""`train` with `sampler: vllm`: refused in one line without vLLM, and a 2-step SmolLM2 run through vLLM (with TIS).

The first tests run everywhere. The training run needs vLLM (`.venv-vllm`, `make setup-vllm`):
`.venv-vllm/bin/python -m pytest -q tests/test_vllm_train.py` (`make test` does); it is skipped elsewhere, or fails
under PETTINGLLMS_REQUIRE_VLLM=1 (conftest.py).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pettingllms_cli.spec.experiment import Experiment

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "experiments" / "smoke.yaml"
QUICKSTART = ROOT / "experiments" / "quickstart.yaml"
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
GAP_BOUND = 0.05  # nats per token; float32 on both sides measures ~1e-5, a stale adapter or wrong prompt far more
TIS_SLACK = 0.05  # |tis_weight - 1|: with gaps of ~1e-5 each truncated importance weight is 1 to ~1e-5
HAS_VLLM = importlib.util.find_spec("vllm") is not None


def run(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pettingllms_cli", *args], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=timeout
    )


def test_the_schema_documents_the_sampler_fields():
    props = Experiment.model_json_schema()["properties"]
    assert props["sampler"]["default"] == "hf" and props["sampler"]["enum"] == ["hf", "vllm"]
    assert "vllm" in props["sampler"]["description"] and "docs/vllm.md" in props["vllm"]["description"]


@pytest.mark.skipif(HAS_VLLM, reason="vLLM is installed here")
@pytest.mark.parametrize("command", ["validate", "train"])
def test_sampler_vllm_without_vllm_is_exit_2_with_one_line(command: str, tmp_path: Path):
    extra = ["--out", str(tmp_path / "run")] if command == "train" else []
    done = run(command, str(SMOKE), "--set", "sampler=vllm", *extra, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    text = done.stderr.strip()
    assert len(text.splitlines()) == 1 and "Traceback" not in text, text
    assert "vLLM is not installed" in text and "make setup-vllm" in text
    assert not (tmp_path / "run").exists()  # refused before the run directory or any weights


@pytest.mark.slow
@pytest.mark.vllm
def test_two_steps_of_train_sample_through_vllm_with_a_small_logprob_gap(tmp_path: Path):
    run_dir = tmp_path / "run"
    sets = [
        "sampler=vllm",
        "algorithm.tis_cap=2",  # truncated importance sampling on the vLLM log-probs (docs/vllm.md)
        "vllm.enforce_eager=true",
        "vllm.cpu_kv_cache_gib=0.5",
        "vllm.max_model_len=1024",
        "train.steps=2",
        "train.problems_per_step=2",
        "train.checkpoint_every=2",
        "train.eval_every=null",
        "env.eval_problems=2",
    ]
    done = run("train", str(QUICKSTART), "--out", str(run_dir), *(a for s in sets for a in ("--set", s)))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    for row in rows:
        gaps = {k: v for k, v in row.items() if k.startswith("sampler_logprob_gap/")}
        assert gaps, sorted(row)
        assert all(v is not None and math.isfinite(v) and 0 <= v < GAP_BOUND for v in gaps.values()), gaps
        weights = {k: v for k, v in row.items() if k.startswith("tis_weight/")}
        assert weights.keys() == {k.replace("sampler_logprob_gap/", "tis_weight/") for k in gaps}, sorted(row)
        assert all(v is not None and abs(v - 1) < TIS_SLACK for v in weights.values()), weights
        rewards = [v for k, v in row.items() if k.startswith("reward") and isinstance(v, float)]
        assert all(math.isfinite(v) for v in rewards), row
