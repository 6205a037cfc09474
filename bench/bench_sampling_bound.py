"""The sampler's tokens/s against what this machine's matrix-multiply rate allows, in one process.

    python bench/bench_sampling_bound.py [--quick] [--repeats R] [--threads N]

The work is one role of a quickstart training step: SmolLM2-135M-Instruct (its base in the dtype `auto` picks here:
bf16 on a CPU with AMX/AVX512-BF16, else fp32; docs/dtype.md), a LoRA r=16
adapter (B drawn non-zero), the tool caller's real prompts (~300 tokens, a few-shot preamble they
all share) for 4 problems, K=4 seeded samples each (16 rows), at most 12 new tokens, temperature 1
(`Team.sample`, as the rollout calls it). Prefill is part of the sampler's time.

The bound: a decode step of B rows is about B x 2 x params FLOP, so at the measured rate R of the base's dtype
(1024x1024 matmuls, the same threads, timed between the sampler's repeats) no sampler makes more
than R / (2 x params) tokens/s. Both sides are timed in process CPU time, so other jobs sharing
the cores slow neither the figure nor its bound (the wall-clock tokens/s is printed as well).
The step's other floor, reading every weight once per step at the measured copy bandwidth, is
printed too: on a CPU it is usually the one that binds.

What stands between the sampler and the bound is printed as two ceilings. `ceiling_with_prefill`: the
sampler must also run every prompt token through the model (the shared few-shot prefix once, each
prompt's own tokens once), at about 2 x params FLOP each, and the bound counts only generated
tokens; so even at the full matmul rate the ratio cannot pass generated / (generated + prompt
tokens). `attainable_over_bound`: the ratio if the sampler did nothing but its matmuls, the prompt
tokens at the square-matmul rate and each decode step as one pass of `rows` rows over every weight
matrix of the model (`decode_matmul_ms_per_step`, timed here: skinny matmuls stream the weights
from memory and run well below the square rate). The gap between that and the measured ratio is
the loop's own cost (attention, picking tokens, the LoRA side products, Python).

`processed_over_bound` counts what the sampler really computes, prompt tokens prefilled and generated tokens, per
CPU second against the same bound: the share of the matmul rate the whole sampling call reaches.

Last line: `sampling_over_bound=<sampler tokens/s over the compute bound>`.
"""

from __future__ import annotations

import statistics
import time

import torch
from common import PrefillCount, base_dtype, bench_args, copy_bytes_per_cpu_second, matmul_flops_per_cpu_second, quickstart_team

MODEL = "smollm2-135m-instruct"
PROBLEMS, K, MAX_NEW_TOKENS = 4, 4, 12


def decode_matmul_seconds(model: torch.nn.Module, rows: int, reps: int = 3) -> float:
    """CPU seconds of one decode step's matmuls alone: `rows` rows through every 2-D weight of the model, in order
    (the tied embedding once, as the output head), LoRA matrices left out; the fastest of `reps` passes."""
    weights = [p for n, p in model.named_parameters() if p.dim() == 2 and "lora_" not in n]
    inputs = {w.shape[1]: torch.randn(rows, w.shape[1], dtype=w.dtype) for w in weights}
    best = float("inf")
    with torch.no_grad():
        for _ in range(reps + 1):  # the first pass warms up
            began = time.process_time()
            for w in weights:
                torch.nn.functional.linear(inputs[w.shape[1]], w)
            best = min(best, time.process_time() - began)
    return best


def make_team():
    """The quickstart team with non-zero LoRA B (an untrained B of zeros would be a no-op)."""
    return quickstart_team("bench_bound")


def main() -> None:
    args, repeats = bench_args(__doc__, "2 timed repeats instead of 5", 2, 5)

    from pettingllms_cli.analysis.rollout_settings import rollout_settings
    from pettingllms_cli.envs.math_tool import generate_problems
    from pettingllms_cli.rollout.episodes import make_envs

    team = make_team()
    model = team.model_of("caller")
    dtype = base_dtype(team)  # `auto`: bf16 on a CPU with AMX/AVX512-BF16, else fp32; the bound uses that dtype's rate
    params = sum(p.numel() for n, p in model.named_parameters() if "lora_" not in n)
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    envs = make_envs(rollout_settings(team.spec), generate_problems(0, PROBLEMS, "bench"))
    prompts = [team.encode("caller", env.observe("tool_caller")) for env in envs]
    seeds = [1000 + i for i in range(PROBLEMS)]

    rates, cpu_seconds, wall_seconds, tokens = [], [], [], 0
    for round_ in range(repeats + 1):  # the first round warms up and is not timed
        rates.append(matmul_flops_per_cpu_second(dtype=dtype))
        began, began_cpu = time.perf_counter(), time.process_time()
        with PrefillCount() as prompt:
            got = team.sample("caller", prompts, K, MAX_NEW_TOKENS, 1.0, seeds=seeds)
        if round_:
            cpu_seconds.append(time.process_time() - began_cpu)
            wall_seconds.append(time.perf_counter() - began)
        tokens = sum(len(c) for row in got for c in row)
    rate, bandwidth = statistics.median(rates), copy_bytes_per_cpu_second()
    decode_steps = max(len(c) for row in got for c in row) - 1  # the prefill's logits give each row's first token
    step_seconds = decode_matmul_seconds(model, PROBLEMS * K)
    attainable = tokens / (prompt.tokens * 2 * params / rate + decode_steps * step_seconds)  # tokens/s, matmuls alone
    sampled = tokens / statistics.median(cpu_seconds)
    compute_bound = rate / (2 * params)  # tokens/s: every token costs 2 x params FLOP
    rows = PROBLEMS * K
    weight_bound = rows * bandwidth / weight_bytes  # tokens/s: each decode step reads every weight once for `rows` tokens
    print(f"{MODEL}: {params / 1e6:.1f}M params, {PROBLEMS} prompts x K={K}, <= {MAX_NEW_TOKENS} new tokens, seeded")
    print(f"base in {dtype}; {torch.get_num_threads()} threads; prompts {[len(p) for p in prompts]} tokens; {tokens} sampled")
    print(f"matmul_gflops={rate / 1e9:.1f}")
    print(f"copy_gb_per_s={bandwidth / 1e9:.2f}")
    print(f"sampling_tokens_per_wall_second={tokens / statistics.median(wall_seconds):.1f}")
    print(f"sampling_tokens_per_second={sampled:.1f}")
    print(f"compute_bound_tokens_per_second={compute_bound:.1f}")
    print(f"weight_read_bound_tokens_per_second={weight_bound:.1f}")
    print(f"prompt_tokens_prefilled={prompt.tokens}")
    print(f"ceiling_with_prefill={PrefillCount.ceiling(tokens, prompt.tokens):.3f}")
    print(f"decode_matmul_ms_per_step={step_seconds * 1e3:.1f}")
    print(f"attainable_over_bound={attainable / compute_bound:.3f}")
    print(f"processed_over_bound={(tokens + prompt.tokens) / statistics.median(cpu_seconds) / compute_bound:.3f}")
    print(f"sampling_over_bound={sampled / compute_bound:.3f}")


if __name__ == "__main__":
    main()
