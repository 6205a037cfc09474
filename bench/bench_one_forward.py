"""All agents in one forward: today's paths against the ones they replaced, in one process, as ratios.

    python bench/bench_one_forward.py [--quick] [--repeats R] [--threads N]

Every figure is a ratio of two ways of doing the same work, alternated round after round in this process
(the first round warms up), each timed in process CPU time so other jobs on the machine slow neither side:

- The quickstart's step (`experiments/quickstart.yaml`, the base in the dtype `auto` picks here, LoRA B drawn
  non-zero, every sample trained): the update with the preamble an adapter's groups share run once per pass
  (`logprobs.run_prefix`) against once per group. `update_prefix_speedup`, `quickstart_step_speedup`.
- A 4-agent team on one SmolLM2 base (4 LoRA r=16 adapters), the tool caller's prompts of 8 problems x K=4,
  greedy, <= 12 new tokens: one forward for every agent's rows, each layer one masked product over the adapters
  (`row_lora.per_row_lora`), against one `sample` call per agent (`mixed_over_per_agent`), against PEFT's own
  mixed-adapter path (`fused_over_peft_mixed`), and against one agent sampling the same rows
  (`team4_over_single`: 1 means the 4 adapters cost nothing; the decode alone: `team4_over_single_decode`). The
  three team ways must give the same tokens (checked). The shared preamble's keys and values depend on the
  adapter, so the team prefills it once per adapter, where one agent prefills it once.
- The quickstart's caller prompts x K=4: the preamble all prompts share prefilled once and each prompt's own
  tokens once, its cache expanded to the K rows (`decoding.prefill`), against prefilling all 16 rows whole
  (`prefix_share_speedup`).
- One decode step of those 16 rows against reading the base's weights once at the copy bandwidth measured here
  (`decode_over_bandwidth_bound`).

The first lines name the CPU and its flags: on a CPU without AMX/AVX512-BF16 `auto` keeps fp32.
Last line: `team4_over_single=<one agent's seconds over the 4-agent team's, same rows>`.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import torch
from bench_dtype import decode_seconds, timed_step
from common import base_dtype, bench_args, copy_bytes_per_cpu_second, perturb_adapters

FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
AGENTS, TEAM_PROBLEMS, K, MAX_NEW_TOKENS = 4, 8, 4, 12


def cpu_line() -> str:
    """The CPU's model name and which of FLAGS it has (from /proc/cpuinfo; `unknown` elsewhere)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "cpu unknown"
    name = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?")
    flags = set(next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), []))
    return f"cpu {name}; " + " ".join(f"{f}={'yes' if f in flags else 'no'}" for f in FLAGS)


def alternate(ways: dict[str, Callable[[], object]], repeats: int) -> tuple[dict[str, float], dict[str, list]]:
    """Each way's median CPU seconds over `repeats` timed rounds (after one warm-up round), and its timed results."""
    seconds: dict[str, list[float]] = {name: [] for name in ways}
    results: dict[str, list] = {name: [] for name in ways}
    for round_ in range(repeats + 1):
        for name, way in ways.items():
            began = time.process_time()
            got = way()
            if round_:
                seconds[name].append(time.process_time() - began)
                results[name].append(got)
    return {name: statistics.median(s) for name, s in seconds.items()}, results


def quickstart_update(repeats: int, quick: bool) -> None:
    """The quickstart's step with and without the shared preamble in the update."""
    from bench_dtype import make_learner

    from pettingllms_cli.algorithms import update as update_module
    from pettingllms_cli.training.loop import load_problems

    spec, team, optimizers = make_learner("auto", 2 if quick else 4)
    problems = load_problems(spec)[0][: spec.train.problems_per_step]
    run_prefix = update_module.run_prefix

    def step(shared: bool):
        update_module.run_prefix = run_prefix if shared else (lambda model, prompts: None)
        try:
            return timed_step(spec, team, optimizers, problems)  # (sampling s, update s, tokens)
        finally:
            update_module.run_prefix = run_prefix

    _, got = alternate({"per_group": lambda: step(False), "shared": lambda: step(True)}, repeats)
    seconds = {name: [statistics.median(r[i] for r in runs) for i in range(2)] for name, runs in got.items()}
    print(f"quickstart: {len(problems)} problems x K={spec.algorithm.group_size}, base in {base_dtype(team)}")
    for name, (sampling, updating) in seconds.items():
        print(f"{name:>9}: sampling {sampling:.2f} CPU s, update {updating:.2f} CPU s (median of {repeats})")
    sampling, updating = seconds["shared"]
    print(f"quickstart_sampling_tokens_per_cpu_second={got['shared'][-1][2] / sampling:.1f}")
    print(f"update_prefix_speedup={seconds['per_group'][1] / updating:.3f}")
    print(f"quickstart_step_speedup={sum(seconds['per_group']) / (sampling + updating):.3f}")


def four_agent_team():
    """4 agents with their own LoRA (r=16, B non-zero) on one SmolLM2 base, in the base dtype `auto` picks."""
    from pettingllms_cli.policy.adapters import Team
    from pettingllms_cli.spec import parse_spec

    names = [f"agent{i}" for i in range(AGENTS)]
    lora = {"r": 16, "alpha": 32}
    spec = parse_spec(
        {
            "name": "bench_one_forward",
            "env": {"name": "math_tool_v0", "layout": "multi", "options": {"ops": "+-*/"}},
            "models": {"smol": {"source": "smollm2-135m-instruct", "dtype": "auto", "quantization": "none"}},
            "agents": {
                names[0]: {"model": "smol", "roles": ["tool_caller"], "lora": lora},
                names[1]: {"model": "smol", "roles": ["verifier"], "lora": lora},
            },
        }
    )
    for name in names[2:]:  # the env has two roles; the sampler only needs more adapters on the base
        spec.agents[name] = spec.agents[names[0]]
    team = Team(spec)
    perturb_adapters(team)
    return team, names


def team_sampling(repeats: int) -> dict[str, float]:
    """The 4-agent team's rows: one forward, one call per agent, PEFT's mixed path, one agent alone."""
    from pettingllms_cli.analysis.rollout_settings import rollout_settings
    from pettingllms_cli.envs.math_tool import generate_problems
    from pettingllms_cli.policy import adapters, decoding
    from pettingllms_cli.rollout.episodes import make_envs

    team, names = four_agent_team()
    envs = make_envs(rollout_settings(team.spec), generate_problems(0, TEAM_PROBLEMS, "bench"))
    prompts = [team.encode(names[0], env.observe("tool_caller")) for env in envs]
    agents = [names[i % AGENTS] for i in range(len(prompts))]
    fused = adapters.per_row_lora
    decode_calls: dict[str, list[float]] = {}  # each way call's CPU seconds in decoding.decode
    spent = [0.0]

    def timed_decode(*args, **kwargs):
        began = time.process_time()
        out = decode(*args, **kwargs)
        spent[0] += time.process_time() - began
        return out

    decode, decoding.decode = decoding.decode, timed_decode

    def way(name: str, run: Callable[[], list]) -> Callable[[], list]:
        def timed() -> list:
            spent[0] = 0.0
            out = run()
            decode_calls.setdefault(name, []).append(spent[0])
            return out

        return timed

    def per_agent() -> list:
        out = [None] * len(prompts)
        for name in names:
            rows = [i for i, a in enumerate(agents) if a == name]
            got = team.sample(name, [prompts[i] for i in rows], K, MAX_NEW_TOKENS, 1.0, greedy=True)
            for i, completions in zip(rows, got, strict=True):
                out[i] = completions
        return out

    def peft_mixed() -> list:
        adapters.per_row_lora = lambda model, rows, dtype: nullcontext()
        try:
            return team.sample_mixed(agents, prompts, K, MAX_NEW_TOKENS, 1.0, greedy=True)
        finally:
            adapters.per_row_lora = fused

    ways = {
        "one_forward": way("one_forward", lambda: team.sample_mixed(agents, prompts, K, MAX_NEW_TOKENS, 1.0, greedy=True)),
        "per_agent": way("per_agent", per_agent),
        "peft_mixed": way("peft_mixed", peft_mixed),
        "single": way("single", lambda: team.sample(names[0], prompts, K, MAX_NEW_TOKENS, 1.0, greedy=True)),
    }
    try:
        seconds, got = alternate(ways, repeats)
    finally:
        decoding.decode = decode
    as_lists = {name: [[c.tolist() for c in row] for row in runs[-1]] for name, runs in got.items()}
    if not as_lists["one_forward"] == as_lists["per_agent"] == as_lists["peft_mixed"]:
        raise SystemExit("the team's ways gave different tokens")
    tokens = sum(len(c) for row in got["one_forward"][-1] for c in row)
    decode_share = {name: statistics.median(calls[1:]) for name, calls in decode_calls.items()}  # the timed rounds
    print(f"team: {AGENTS} adapters x {TEAM_PROBLEMS // AGENTS} prompts each, K={K}, <= {MAX_NEW_TOKENS} new tokens, greedy")
    for name, s in seconds.items():
        print(f"{name:>11}: {s:6.2f} CPU s, {tokens / s:6.1f} tokens/CPU s, decode {decode_share[name]:.2f} CPU s")
    print(f"mixed_over_per_agent={seconds['per_agent'] / seconds['one_forward']:.3f}")
    print(f"fused_over_peft_mixed={seconds['peft_mixed'] / seconds['one_forward']:.3f}")
    print(f"team4_over_single_decode={decode_share['single'] / decode_share['one_forward']:.3f}")
    return {"team4_over_single": seconds["single"] / seconds["one_forward"]}


@torch.inference_mode()
def prefix_and_decode(repeats: int) -> None:
    """The quickstart caller's 4 prompts x K=4: prefill with and without the shared prefix, and one decode step."""
    from bench_dtype import make_learner

    from pettingllms_cli.analysis.rollout_settings import rollout_settings
    from pettingllms_cli.policy import decoding
    from pettingllms_cli.policy.logprobs import pad as pad_rows
    from pettingllms_cli.rollout.episodes import make_envs
    from pettingllms_cli.training.loop import load_problems

    spec, team, _ = make_learner("auto", 4)
    envs = make_envs(rollout_settings(spec), load_problems(spec)[0][:4])
    prompts = [team.encode("caller", env.observe("tool_caller")) for env in envs]
    model = team.activate("caller")
    model.eval()
    pad = team.tokenizer_of("caller").pad_token_id
    ids, mask = pad_rows([p for p in prompts for _ in range(K)], pad, side="left")  # every row whole, each prompt K times
    seconds, _ = alternate(
        {
            "shared": lambda: decoding.prefill(model, prompts, pad, K, None),
            "whole_rows": lambda: model(input_ids=ids, attention_mask=mask, use_cache=True, logits_to_keep=1),
        },
        repeats,
    )
    step = decode_seconds(team, prompts, 3)
    weight_bytes = sum(p.numel() * p.element_size() for p in model.get_base_model().parameters())
    bandwidth = copy_bytes_per_cpu_second()
    print(f"prefill: prompts {[len(p) for p in prompts]} tokens, {decoding.prefix_run_once(prompts)} shared, x K={K}")
    print(f"prefill_shared_cpu_seconds={seconds['shared']:.2f}")
    print(f"prefill_whole_rows_cpu_seconds={seconds['whole_rows']:.2f}")
    print(f"prefix_share_speedup={seconds['whole_rows'] / seconds['shared']:.3f}")
    print(f"copy_gb_per_s={bandwidth / 1e9:.2f}")
    print(f"decode_ms_{len(ids)}_rows={step * 1e3:.1f}")
    print(f"decode_over_bandwidth_bound={step / (weight_bytes / bandwidth):.2f}")


def main() -> None:
    args, repeats = bench_args(__doc__, "1 timed round and 2 problems per quickstart step (instead of 3 and 4)", 1, 3)
    print(cpu_line())
    print(f"torch threads={torch.get_num_threads()}")
    quickstart_update(repeats, args.quick)
    prefix_and_decode(repeats)
    team = team_sampling(repeats)
    print(f"team4_over_single={team['team4_over_single']:.3f}")


if __name__ == "__main__":
    main()
