"""The same sampling work through the built-in sampler (`hf`, `Team.sample_mixed`) and `vllm` (`VllmSampler`), in one run.

    .venv-vllm/bin/python bench/bench_sampler.py [--quick] [--tokens 64 256] [--problems N] [--hf-threads 1]

SmolLM2-135M-Instruct (fp32), two agents (tool caller and verifier, LoRA r=16, B drawn non-zero
so each adapter changes the tokens) on one base, each given the tool caller's prompt of N math
problems; K = 8 seeded samples per prompt at temperature 1, in one mixed-adapter call per side,
at 64 and at 256 new tokens (`--quick`: the same lengths, 1 problem per agent, 1 repeat).
Each side's tokens/s counts the tokens it generated (completions stop at EOS, so the two counts
differ a little) over the median of its timed repeats; vLLM's engine start is timed apart and
not counted. The CPU engine runs with enforce_eager (no torch.compile); on a 2-core machine it
binds one core and keeps one free, so compare with `--hf-threads 1`.

Prints, per length n: `hf_tokens_per_second_<n>`, `vllm_tokens_per_second_<n>` and their ratio
`vllm_over_hf_<n>`. Last line: `vllm_over_hf=<x>`, the ratio at the longest length (256 by
default), where decoding rather than prefill sets the pace.
Without vLLM it prints how to install it and exits 0.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import time
import warnings

import torch
from common import quickstart_team

K = 8


def make_team():
    """The quickstart team with non-zero LoRA B (an untrained B of zeros would be a no-op)."""
    return quickstart_team("bench_sampler")


def timed(fn, repeats: int) -> tuple[float, int]:
    """Median seconds of `repeats` calls and the tokens the last one generated."""
    seconds, tokens = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        seconds.append(time.perf_counter() - start)
        tokens = sum(len(c) for row in out for c in row)
    return statistics.median(seconds), tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1 problem per agent, 1 repeat (both lengths)")
    parser.add_argument("--tokens", type=int, nargs="+", default=None, help="completion lengths (default 64 256)")
    parser.add_argument("--problems", type=int, default=None, help="problems per agent (default 4)")
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats per side (default 2)")
    parser.add_argument("--hf-threads", type=int, default=None, help="torch threads for HF (vLLM's CPU engine uses its own)")
    args = parser.parse_args()
    if importlib.util.find_spec("vllm") is None:
        print("vLLM is not installed: nothing to compare. `make setup-vllm`, then run this with .venv-vllm/bin/python")
        return
    warnings.filterwarnings("ignore")
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout keeps only the figures
    lengths = sorted(args.tokens or [64, 256])
    problems = args.problems or (1 if args.quick else 4)
    repeats = args.repeats or (1 if args.quick else 2)

    from pettingllms_cli.analysis.rollout_settings import rollout_settings
    from pettingllms_cli.envs.math_tool import generate_problems
    from pettingllms_cli.policy.vllm_sampler import VllmSampler
    from pettingllms_cli.rollout.episodes import make_envs
    from pettingllms_cli.spec.sampler_settings import VllmSettings

    if args.hf_threads:
        torch.set_num_threads(args.hf_threads)
    team = make_team()
    envs = make_envs(rollout_settings(team.spec), generate_problems(0, 2 * problems, "bench"))
    agents = ["caller" if i % 2 == 0 else "verifier" for i in range(len(envs))]
    prompts = [team.encode(a, env.observe("tool_caller")) for a, env in zip(agents, envs, strict=True)]
    seeds = list(range(len(prompts)))
    start = time.perf_counter()
    sampler = VllmSampler(team, VllmSettings(enforce_eager=True, cpu_kv_cache_gib=1.0, max_model_len=1024))
    print(f"vllm_engine_start_seconds={time.perf_counter() - start:.1f}")
    mean_prompt = sum(map(len, prompts)) // len(prompts)
    print(f"# {len(prompts)} prompts (~{mean_prompt} tokens) x K={K}, 2 adapters, torch threads={torch.get_num_threads()}")
    sampler.sample_mixed(agents, prompts, 1, 4, 1.0, seeds=seeds)  # warm-up: the first call loads the adapters
    ratio = float("nan")
    for n in lengths:
        hf = lambda n=n: team.sample_mixed(agents, prompts, K, n, 1.0, seeds=seeds)  # noqa: E731
        vl = lambda n=n: sampler.sample_mixed(agents, prompts, K, n, 1.0, seeds=seeds)  # noqa: E731
        hf_s, hf_tokens = timed(hf, repeats)
        vl_s, vl_tokens = timed(vl, repeats)
        ratio = (vl_tokens / vl_s) / (hf_tokens / hf_s)
        print(f"max_new_tokens={n}: hf {hf_tokens} tokens in {hf_s:.1f} s, vllm {vl_tokens} tokens in {vl_s:.1f} s")
        print(f"hf_tokens_per_second_{n}={hf_tokens / hf_s:.1f}")
        print(f"vllm_tokens_per_second_{n}={vl_tokens / vl_s:.1f}")
        print(f"vllm_over_hf_{n}={ratio:.3f}")
    sampler.close()
    print(f"vllm_over_hf={ratio:.3f}")


if __name__ == "__main__":  # vLLM spawns its engine process
    main()
