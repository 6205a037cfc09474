"""The quickstart's task trained two ways, in one process: as the built-in env, and as a program that plays the same
env through the OpenAI-compatible endpoint (docs/external.md).

    python bench/bench_external.py [--quick] [--repeats R] [--threads N]

Both arms are `experiments/quickstart.yaml` (caller + verifier on SmolLM2-135M-Instruct, LoRA r=16, B drawn non-zero,
4 problems x K=4 per step) with `rollout: parallel`: K independent episodes per problem, the only way an external
program is played. The external arm's program (`drive`, below) builds math_tool_v0 from the problem it is handed and
asks the endpoint for each role's action with the env's own messages, so both arms sample the same prompts; its
episode reward is the env's success. A step is what `train` runs: the rollout, then the update over every sample
(advantages set to +-1 so each sample is trained whatever the rewards). The arms alternate, repeat after repeat (the
first round warms up), each timed in wall seconds (what a user waits: the endpoint's HTTP round trips and batching
window included) and in process CPU seconds (every thread of the process: server, client, sampling, update).

Last line: `external_over_builtin_step=<median external step over median built-in step, wall seconds>`; the target
is at most 1.25.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `common`, and this module as the external program
from common import bench_args, perturb_adapters  # noqa: E402

SPEC = Path(__file__).resolve().parents[1] / "experiments" / "quickstart.yaml"
AGENT_OF = {"tool_caller": "caller", "verifier": "verifier"}  # the quickstart's roles
OPS = "+-*/"


def drive(problem: dict, base_url: str) -> dict:
    """The external arm's program: math_tool_v0 played through the endpoint, each role asked with the env's messages."""
    from openai import OpenAI

    from pettingllms_cli.envs import Problem
    from pettingllms_cli.envs.math_tool import MathToolEnv
    from pettingllms_cli.envs.messages import action_text

    client = OpenAI(base_url=base_url, api_key="unused", max_retries=0)
    env = MathToolEnv(Problem(**problem), "multi", 1, {"ops": OPS})
    while not env.done:
        role = env.current_role
        messages = env.observe(role)
        reply = client.chat.completions.create(model=AGENT_OF[role], messages=messages)
        env.step(role, action_text(messages, reply.choices[0].message.content or ""))
    return {"reward": float(env.success)}


def make_learner(external: bool, problems: int):
    """(spec, team, optimizers) of the quickstart under `rollout: parallel`, built in or external."""
    from pettingllms_cli.algorithms.optim import make_optimizers
    from pettingllms_cli.policy.adapters import Team
    from pettingllms_cli.spec import load_spec
    from pettingllms_cli.training.update_settings import optim_settings

    sets = ["models.smol.dtype=float32", f"train.problems_per_step={problems}", "algorithm.rollout=parallel"]
    spec = load_spec(SPEC, sets)
    if external:
        tree = spec.model_dump(mode="json")
        options = {"program": "bench_external:drive", "data": "math_tool_v0", "env_options": {"ops": OPS}, "concurrency": 16}
        tree["env"] |= {"name": "external", "options": options}
        spec = type(spec).model_validate(tree)
    team = Team(spec)
    perturb_adapters(team)
    return spec, team, make_optimizers(team, optim_settings(spec))


def timed_step(spec, team, optimizers, problems) -> tuple[float, float, int, int]:
    """(wall seconds, CPU seconds, tokens sampled, actions) of one training step on `problems`."""
    from pettingllms_cli.algorithms.update import update
    from pettingllms_cli.analysis.rollout_settings import rollout_settings
    from pettingllms_cli.rollout.collect import rollout as play
    from pettingllms_cli.rollout.episodes import make_envs
    from pettingllms_cli.training.update_settings import update_settings

    torch.manual_seed(0)  # both arms draw from the same seeds
    wall, cpu = time.perf_counter(), time.process_time()
    settings = rollout_settings(spec)  # rollout: parallel in both arms
    rollout = play(team, settings, make_envs(settings, problems), settings.group_size)
    samples = rollout.samples
    advantages = [1.0 if i % 2 else -1.0 for i in range(len(samples))]  # every sample trained, whatever the rewards
    update(team, optimizers, samples, advantages, update_settings(spec))
    return time.perf_counter() - wall, time.process_time() - cpu, rollout.tokens, len(samples)


def main() -> None:
    args, repeats = bench_args(__doc__, "2 problems per step and 1 timed round (instead of 4 and 3)", 1, 3)
    per_step = 2 if args.quick else 4

    from pettingllms_cli.training.loop import load_problems

    arms = {"builtin": make_learner(False, per_step), "external": make_learner(True, per_step)}
    problems = load_problems(arms["builtin"][0])[0][:per_step]  # the same problems for both arms
    runs: dict[str, list[tuple[float, float, int, int]]] = {arm: [] for arm in arms}
    for round_ in range(repeats + 1):  # the first round warms up and is not timed
        for arm, (spec, team, optimizers) in arms.items():
            got = timed_step(spec, team, optimizers, problems)
            if round_:
                runs[arm].append(got)

    spec = arms["builtin"][0]
    print(f"{spec.name} (rollout: parallel): {per_step} problems x K={spec.algorithm.group_size}, "
          f"{torch.get_num_threads()} threads, median of {repeats}")  # fmt: skip
    median = {arm: [statistics.median(r[i] for r in runs[arm]) for i in range(2)] for arm in arms}
    for arm in arms:
        wall, cpu = median[arm]
        print(f"{arm}_actions={runs[arm][-1][3]}")
        print(f"{arm}_tokens={runs[arm][-1][2]}")
        print(f"{arm}_step_seconds={wall:.2f}")
        print(f"{arm}_step_cpu_seconds={cpu:.2f}")
    print(f"external_over_builtin_step_cpu={median['external'][1] / median['builtin'][1]:.3f}")
    print(f"external_over_builtin_step={median['external'][0] / median['builtin'][0]:.3f}")


if __name__ == "__main__":
    main()
