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
def test_bench_one_forward_prints_its_ratios():
    figures = run_bench("bench_one_forward.py")  # it also exits non-zero if the team's ways give different tokens
    for name in (
        "team4_over_single",
        "team4_over_single_decode",
        "mixed_over_per_agent",
        "fused_over_peft_mixed",
        "prefix_share_speedup",
        "update_prefix_speedup",
        "decode_over_bandwidth_bound",
    ):
        assert math.isfinite(figures[name]) and figures[name] > 0, name


@pytest.mark.slow
def test_bench_eval_prints_ratio():
    figures = run_bench("bench_eval.py")
    assert math.isfinite(figures["eval_over_train_sampling"])
    assert "eval_tokens_per_second" in figures and "train_sampling_tokens_per_second" in figures
    assert 0 < figures["flop_parity"] and figures["eval_prompt_tokens_per_generated"] > 0


@pytest.mark.slow
def test_bench_sampling_bound_prints_ratio():
    figures = run_bench("bench_sampling_bound.py")
    assert math.isfinite(figures["sampling_over_bound"])
    assert "compute_bound_tokens_per_second" in figures and "matmul_gflops" in figures
    assert 0 < figures["ceiling_with_prefill"] <= 1 and figures["prompt_tokens_prefilled"] > 0
    assert figures["attainable_over_bound"] > 0 and figures["decode_matmul_ms_per_step"] > 0


@pytest.mark.slow
def test_bench_dtype_prints_ratios_last_the_step():
    figures = run_bench("bench_dtype.py")
    for key in ("bf16_over_fp32_sampling", "bf16_over_fp32_update", "decode_ms_16_rows", "decode_over_bandwidth_bound"):
        assert math.isfinite(figures[key]) and figures[key] > 0, key
    assert list(figures)[-1] == "bf16_over_fp32_step" and figures["bf16_over_fp32_step"] > 0


def test_prefill_count_is_the_shared_prefix_once_per_adapter_plus_each_prompts_own_tokens(smoke_spec, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    from common import PrefillCount

    from pettingllms_cli.policy import decoding
    from pettingllms_cli.policy.adapters import Team

    team, original = Team(smoke_spec), decoding.prefill
    shared = list(range(5, 5 + decoding.MIN_SHARED_PREFIX + 2))  # long enough to be prefilled once
    prompts = [shared + [40, 41, 42], shared + [43], shared + [44, 45]]
    with PrefillCount() as count:
        team.sample_mixed(["caller", "verifier", "caller"], prompts, 2, 2, 1.0, seeds=[1, 2, 3])
    assert count.tokens == len(shared) * 2 + 6  # two adapters each run the prefix; 3 + 1 + 2 own tokens
    assert decoding.prefill is original  # uninstalled on exit
    with PrefillCount() as count:
        team.sample("caller", prompts[:1], 2, 2, 1.0, seeds=[1])
    assert count.tokens == len(prompts[0])  # one prompt: nothing shared, every token its own
    assert PrefillCount.ceiling(10, 30) == 0.25


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
