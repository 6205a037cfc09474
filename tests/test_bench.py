"""The bench scripts run in `--quick` mode and print their figures (the figures are not asserted)."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIGURE_RE = re.compile(r"^(\w+)=(\S+)$")


def run_bench(script: str) -> dict[str, float]:
    """Run bench/<script> --quick; return its `key=<float>` lines, and require the last line to be one."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), "--quick"], cwd=ROOT, capture_output=True, text=True, timeout=1800
    )
    assert done.returncode == 0, f"{script} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    lines = done.stdout.strip().splitlines()
    assert lines and FIGURE_RE.match(lines[-1]), f"{script}: last line is not key=<float>:\n{done.stdout[-2000:]}"
    return {m[1]: float(m[2]) for m in map(FIGURE_RE.match, lines) if m}


@pytest.mark.slow
def test_bench_vs_trl_prints_speedup():
    figures = run_bench("bench_vs_trl.py")
    assert math.isfinite(figures["speedup_vs_trl"])
    assert "pettingllms_tokens_per_second" in figures and "trl_tokens_per_second" in figures


@pytest.mark.slow
def test_bench_memory_prints_ratio():
    figures = run_bench("bench_memory.py")
    assert math.isfinite(figures["agents6_over_agents1"])


@pytest.mark.slow
def test_bench_mixed_sampling_prints_speedup():
    figures = run_bench("bench_mixed_sampling.py")  # it also exits non-zero if the two ways' tokens differ
    assert math.isfinite(figures["mixed_over_per_agent_speedup"])


@pytest.mark.slow
def test_bench_eval_prints_ratio():
    figures = run_bench("bench_eval.py")
    assert math.isfinite(figures["eval_over_train_sampling"])
    assert "eval_tokens_per_second" in figures and "train_sampling_tokens_per_second" in figures


@pytest.mark.slow
def test_bench_sampling_bound_prints_ratio():
    figures = run_bench("bench_sampling_bound.py")
    assert math.isfinite(figures["sampling_over_bound"])
    assert "compute_bound_tokens_per_second" in figures and "matmul_gflops" in figures


def test_gpu_check_dry_run_lists_its_steps():
    """Without CUDA (and with it), --dry-run prints every step it would run and exits 0."""
    done = subprocess.run(
        ["bash", str(ROOT / "bench" / "gpu_check.sh"), "--dry-run"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    for step in ("experiments/smoke.yaml", "experiments/quickstart.yaml --out", "--max-steps 2", "bench/bench_vs_trl.py --quick"):
        assert step in done.stdout, step
    assert done.stdout.count("dtype=bfloat16") == 2
    assert "peak_memory" in done.stdout and ("vllm" in done.stdout.lower())
