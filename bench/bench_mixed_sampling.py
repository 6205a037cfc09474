"""Several agents on one base, one role: one mixed-adapter generate vs one generate per agent, in one process.

    python bench/bench_mixed_sampling.py [--quick] [--repeats R]

With `rotate` or `adaptive` roles, the episodes of a step give one role to different agents; the
rollout then samples every episode's action in one `Team.sample_mixed` call (PEFT mixed-adapter
batch on the shared base) instead of one `Team.sample` call per agent. This bench times both
on SmolLM2-135M-Instruct (fp32, CPU), 2 agents with LoRA r=8 on all linear layers (B drawn
non-zero, so each adapter changes the tokens), the tool caller's prompt of a math problem (~190 tokens) per row, K
samples each, greedy so both ways must give the same tokens (checked). The two ways alternate,
repeat after repeat, and the figure is the ratio of their median times.

Last line: `mixed_over_per_agent_speedup=<per-agent seconds over mixed seconds>`.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

from common import perturb_adapters

from pettingllms_cli.analysis.rollout_settings import rollout_settings
from pettingllms_cli.envs.math_tool import generate_problems
from pettingllms_cli.rollout.episodes import make_envs
from pettingllms_cli.spec import parse_spec

MODEL = "smollm2-135m-instruct"
K, MAX_NEW_TOKENS = 4, 16


def make_team():
    """The quickstart team (tool caller + verifier on one SmolLM2 base) with `rotate` roles."""
    from pettingllms_cli.policy.adapters import Team

    roles = ["tool_caller", "verifier"]
    names = [f"agent{i}" for i in range(len(roles))]
    spec = parse_spec(
        {
            "name": "bench_mixed",
            "env": {"name": "math_tool_v0", "layout": "multi"},
            "models": {"smol": {"source": MODEL, "dtype": "float32", "quantization": "none"}},
            "agents": {n: {"model": "smol", "roles": [r], "lora": {"r": 8, "alpha": 16}} for n, r in zip(names, roles)},  # noqa: B905
            "assignment": {"mode": "rotate"},
        }
    )
    team = Team(spec)
    perturb_adapters(team)
    return team, names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2 problems per agent and 2 repeats instead of 4 and 3")
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    per_agent_problems = 2 if args.quick else 4
    repeats = args.repeats or (2 if args.quick else 3)

    team, names = make_team()
    envs = make_envs(rollout_settings(team.spec), generate_problems(0, per_agent_problems * len(names), "bench"))
    agents = [names[i % len(names)] for i in range(len(envs))]  # what `rotate` gives one role over a step
    prompts = [team.encode(a, env.observe("tool_caller")) for a, env in zip(agents, envs, strict=True)]  # the real prompt

    def per_agent() -> list:
        out = [None] * len(prompts)
        for name in names:
            idx = [i for i, a in enumerate(agents) if a == name]
            for i, c in zip(idx, team.sample(name, [prompts[i] for i in idx], K, MAX_NEW_TOKENS, 1.0, greedy=True), strict=True):
                out[i] = c
        return out

    def mixed() -> list:
        return team.sample_mixed(agents, prompts, K, MAX_NEW_TOKENS, 1.0, greedy=True)

    seconds: dict[str, list[float]] = {"per_agent": [], "mixed": []}
    tokens = 0
    for _ in range(repeats + 1):  # the first round warms up and is not timed
        results = {}
        for name, way in (("per_agent", per_agent), ("mixed", mixed)):
            began = time.perf_counter()
            results[name] = way()
            seconds[name].append(time.perf_counter() - began)
        as_lists = {name: [[c.tolist() for c in row] for row in got] for name, got in results.items()}
        if as_lists["mixed"] != as_lists["per_agent"]:
            raise SystemExit("mixed-adapter sampling gave other tokens than per-agent sampling")
        tokens = sum(len(c) for row in results["mixed"] for c in row)
    timed = {name: statistics.median(s[1:]) for name, s in seconds.items()}
    print(f"{MODEL}, {len(names)} agents x {per_agent_problems} prompts, K={K}, <= {MAX_NEW_TOKENS} new tokens, greedy")
    for name, s in timed.items():
        print(f"{name:>9}: {s:6.2f} s, {tokens / s:6.1f} tokens/s (median of {repeats})")
    print(f"mixed_over_per_agent_speedup={timed['per_agent'] / timed['mixed']:.3f}")


if __name__ == "__main__":
    main()
