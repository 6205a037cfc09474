"""A quickstart training step with the base in fp32 and in bf16, in one process: sampling and update timed apart.

    python bench/bench_dtype.py [--quick] [--repeats R] [--threads N]

Two teams of `experiments/quickstart.yaml` (caller + verifier on SmolLM2-135M-Instruct, LoRA r=16, B drawn non-zero),
one with `dtype: float32`, one with `dtype: bfloat16`; LoRA weights and AdamW are fp32 in both. A step is what
`train` runs: the tree rollout of the step's problems (K=4 samples per action, seeded), then the update over every
sample (advantages set to +-1 so each sample is trained whatever the rewards). The two dtypes alternate, repeat
after repeat (the first round warms up), each timed in process CPU time, so other jobs sharing the cores slow
neither side. The ratios are fp32 seconds over bf16 seconds: above 1, bf16 is faster.

`decode_ms_16_rows`: one decode step of the 16 rows a quickstart step samples (4 prompts x K=4, the caller's
~250-token prompt prefilled first), in the dtype `auto` picks on this machine. `decode_over_bandwidth_bound`: that
time over the least a step can take, reading the base's weights once at the copy bandwidth measured here.

On a CPU without AMX/AVX512-BF16, bf16 matmuls are emulated through fp32 and the ratios fall below 1: `auto` then
keeps fp32 (docs/dtype.md).

Last line: `bf16_over_fp32_step=<fp32 step seconds over bf16 step seconds>`.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch
from common import base_dtype, bench_args, copy_bytes_per_cpu_second, perturb_adapters

SPEC = Path(__file__).resolve().parents[1] / "experiments" / "quickstart.yaml"
DTYPES = ("float32", "bfloat16")
ROWS = 16  # the quickstart's 4 problems x K=4
DECODE_STEPS = 8


def make_learner(dtype: str, problems: int):
    """(spec, team, optimizers) of the quickstart with its base in `dtype` and `problems` problems per step."""
    from pettingllms_cli.algorithms.optim import make_optimizers
    from pettingllms_cli.policy.adapters import Team
    from pettingllms_cli.spec import load_spec
    from pettingllms_cli.training.update_settings import optim_settings

    spec = load_spec(SPEC, [f"models.smol.dtype={dtype}", f"train.problems_per_step={problems}"])
    team = Team(spec)
    perturb_adapters(team)
    return spec, team, make_optimizers(team, optim_settings(spec))


def timed_step(spec, team, optimizers, problems) -> tuple[float, float, int]:
    """(sampling CPU seconds, update CPU seconds, tokens sampled) of one training step on `problems`."""
    from pettingllms_cli.algorithms.update import update
    from pettingllms_cli.analysis.rollout_settings import rollout_settings
    from pettingllms_cli.rollout.collect import collect
    from pettingllms_cli.training.update_settings import update_settings

    torch.manual_seed(0)  # both dtypes draw from the same seeds
    began = time.process_time()
    rollout = collect(team, rollout_settings(spec), problems)
    sampled = time.process_time()
    samples = rollout.samples + rollout.intents
    advantages = [1.0 if i % 2 else -1.0 for i in range(len(samples))]  # every sample trained, whatever the rewards
    update(team, optimizers, samples, advantages, update_settings(spec))
    return sampled - began, time.process_time() - sampled, rollout.tokens


@torch.inference_mode()
def decode_seconds(team, prompts: list[list[int]], steps: int) -> float:
    """CPU seconds of one decode step of `prompts` x K=4 rows (prefill excluded), the median of `steps` steps."""
    from pettingllms_cli.policy import decoding

    model = team.activate("caller")
    model.eval()
    pad = team.tokenizer_of("caller").pad_token_id
    start = decoding.prefill(model, prompts, pad, 4, None)
    times: list[float] = []

    def pick(logits: torch.Tensor) -> torch.Tensor:
        times.append(time.process_time())
        return logits.argmax(-1)

    decoding.decode(model, start, pick, steps + 1, None, pad, None)  # no EOS: exactly `steps` forwards
    model.train()
    return statistics.median(b - a for a, b in zip(times, times[1:], strict=False))


def main() -> None:
    args, repeats = bench_args(__doc__, "2 problems per step and 1 timed round (instead of 4 and 3)", 1, 3)
    per_step = 2 if args.quick else 4

    from pettingllms_cli import distributed
    from pettingllms_cli.analysis.rollout_settings import rollout_settings
    from pettingllms_cli.models.precision import resolve_precision
    from pettingllms_cli.rollout.episodes import make_envs
    from pettingllms_cli.training.loop import load_problems

    learners = {dtype: make_learner(dtype, per_step) for dtype in DTYPES}
    spec = learners["float32"][0]
    problems = load_problems(spec)[0][:per_step]
    runs: dict[str, list[tuple[float, float, int]]] = {dtype: [] for dtype in DTYPES}
    for round_ in range(repeats + 1):  # the first round warms up and is not timed
        for dtype, (spec_d, team, optimizers) in learners.items():
            got = timed_step(spec_d, team, optimizers, problems)
            if round_:
                runs[dtype].append(got)

    auto = resolve_precision(spec.models["smol"].model_copy(update={"dtype": "auto"}), distributed.device())
    team = learners[auto.dtype][1]
    envs = make_envs(rollout_settings(spec), load_problems(spec)[0][: ROWS // 4])  # the quickstart's 4 problems, whatever --quick
    prompts = [team.encode("caller", env.observe("tool_caller")) for env in envs]
    decode = {dtype: decode_seconds(learners[dtype][1], prompts, 3 if args.quick else DECODE_STEPS) for dtype in DTYPES}
    weight_bytes = sum(p.numel() * p.element_size() for p in team.models["smol"].get_base_model().parameters())
    bandwidth = copy_bytes_per_cpu_second()

    median = {d: [statistics.median(r[i] for r in runs[d]) for i in range(2)] for d in DTYPES}  # [sampling, update]
    k, threads = spec.algorithm.group_size, torch.get_num_threads()
    print(f"{spec.name}: {per_step} problems x K={k}, {threads} threads, median of {repeats}")
    print(f"auto here: {auto.dtype} ({auto.why}); decode prompts {[len(p) for p in prompts]} tokens; base in {base_dtype(team)}")
    for dtype in DTYPES:
        sampling, updating = median[dtype]
        print(f"{dtype}_tokens={runs[dtype][-1][2]}")
        print(f"{dtype}_sampling_cpu_seconds={sampling:.2f}")
        print(f"{dtype}_update_cpu_seconds={updating:.2f}")
        print(f"{dtype}_decode_ms_{ROWS}_rows={decode[dtype] * 1e3:.1f}")
    print(f"copy_gb_per_s={bandwidth / 1e9:.2f}")
    print(f"weight_mb={weight_bytes / 2**20:.0f}")
    print(f"bf16_over_fp32_sampling={median['float32'][0] / median['bfloat16'][0]:.3f}")
    print(f"bf16_over_fp32_update={median['float32'][1] / median['bfloat16'][1]:.3f}")
    print(f"decode_ms_{ROWS}_rows={decode[auto.dtype] * 1e3:.1f}")
    print(f"decode_over_bandwidth_bound={decode[auto.dtype] / (weight_bytes / bandwidth):.2f}")
    print(f"bf16_over_fp32_step={sum(median['float32']) / sum(median['bfloat16']):.3f}")


if __name__ == "__main__":
    main()
