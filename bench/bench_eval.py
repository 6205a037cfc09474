"""Held-out evaluation's generated tokens/s against training sampling's, on the same team, in one process.

    python bench/bench_eval.py [--quick] [--repeats R] [--threads N]

The team is `experiments/quickstart.yaml` (two SmolLM2-135M-Instruct agents on one base, in the dtype `auto`
picks here, LoRA r=16). Evaluation is `evaluate` as `train` runs it before and after training: one greedy
episode per held-out problem (24; 8 with --quick), action log-probs included. Training sampling
is one step's `tree_rollout`: 4 problems, K=4 seeded samples per action. Both count the
completion tokens they generate (EOS included) and include stepping the envs. The two alternate,
repeat after repeat (the first round warms up), and each is timed in process CPU time, so other
jobs sharing the cores slow neither side; wall-clock figures are printed as well.

Each side also counts the prompt tokens it runs through the model (`PrefillCount`: a shared few-shot
prefix once per adapter, each prompt's own tokens once). A prompt token costs about as many FLOP as a
generated one, and evaluation samples one completion per prompt where training samples K, so it
runs several times more prompt tokens per generated token. `flop_parity` is what the ratio would be
if both sides ran every token at one rate: the ratio can exceed it only where evaluation's work
(mostly large prefill matmuls) runs at a higher FLOP rate than training sampling's (mostly skinny
decode matmuls); making training's decode faster lowers the ratio. `<side>_processed_over_bound`: prompt and
generated tokens per CPU second over the square-matmul rate of the base's dtype / (2 x params), the share of that
rate each side reaches.

Last line: `eval_over_train_sampling=<eval tokens per CPU second over training sampling's>`.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from common import PrefillCount, base_dtype, bench_args, matmul_flops_per_cpu_second

SPEC = Path(__file__).resolve().parents[1] / "experiments" / "quickstart.yaml"


def timed(work: Callable[[], int]) -> tuple[int, float, float]:
    """Run work (it returns the tokens it generated); (tokens, CPU seconds, wall seconds)."""
    began, began_cpu = time.perf_counter(), time.process_time()
    tokens = work()
    return tokens, time.process_time() - began_cpu, time.perf_counter() - began


def main() -> None:
    args, repeats = bench_args(__doc__, "8 eval problems and 1 timed round instead of 24 and 3", 1, 3)

    from pettingllms_cli.analysis.evaluate import evaluate
    from pettingllms_cli.analysis.rollout_settings import rollout_settings
    from pettingllms_cli.policy.adapters import Team
    from pettingllms_cli.rollout.collect import rollout
    from pettingllms_cli.rollout.episodes import make_envs
    from pettingllms_cli.spec import load_spec
    from pettingllms_cli.training.loop import load_problems

    spec = load_spec(SPEC)
    team = Team(spec)
    train_problems, eval_problems = load_problems(spec)
    eval_problems = eval_problems[: 8 if args.quick else spec.env.eval_problems]
    step_problems = train_problems[: spec.train.problems_per_step]

    def eval_work() -> int:
        return evaluate(team, spec, eval_problems)["tokens_generated"]

    def train_work() -> int:
        torch.manual_seed(0)
        settings = rollout_settings(spec)
        return rollout(team, settings, make_envs(settings, step_problems), settings.group_size).tokens  # one step's sampling

    runs: dict[str, list[tuple[int, float, float]]] = {"eval": [], "train_sampling": []}
    prompt_tokens: dict[str, int] = {}
    for round_ in range(repeats + 1):  # the first round warms up and is not timed
        for name, work in (("eval", eval_work), ("train_sampling", train_work)):
            with PrefillCount() as prompt:
                got = timed(work)
            prompt_tokens[name] = prompt.tokens
            if round_:
                runs[name].append(got)
    rates = {}
    k = spec.algorithm.group_size
    dtype = base_dtype(team)
    params = sum(p.numel() for n, p in next(iter(team.models.values())).named_parameters() if "lora_" not in n)
    bound = matmul_flops_per_cpu_second(dtype=dtype) / (2 * params)  # tokens/s at the dtype's square-matmul rate
    print(f"{spec.name}: eval {len(eval_problems)} greedy episodes, training sampling {len(step_problems)} problems x K={k}")
    print(f"base in {dtype}; {torch.get_num_threads()} threads, median of {repeats}")
    print(f"compute_bound_tokens_per_second={bound:.1f}")
    for name, got in runs.items():
        tokens = got[-1][0]
        cpu, wall = statistics.median(g[1] for g in got), statistics.median(g[2] for g in got)
        rates[name] = tokens / cpu
        print(f"{name}_tokens={tokens}")
        print(f"{name}_cpu_seconds={cpu:.2f}")
        print(f"{name}_tokens_per_wall_second={tokens / wall:.1f}")
        print(f"{name}_tokens_per_second={rates[name]:.1f}")
        print(f"{name}_prompt_tokens_per_generated={prompt_tokens[name] / tokens:.2f}")
        print(f"{name}_processed_over_bound={(tokens + prompt_tokens[name]) / cpu / bound:.3f}")
    ceilings = {name: PrefillCount.ceiling(got[-1][0], prompt_tokens[name]) for name, got in runs.items()}
    print(f"flop_parity={ceilings['eval'] / ceilings['train_sampling']:.3f}")
    print(f"eval_over_train_sampling={rates['eval'] / rates['train_sampling']:.3f}")


if __name__ == "__main__":
    main()
