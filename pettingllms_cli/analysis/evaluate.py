"""Score the team on fixed problems: one episode per problem, greedy by default.

`evaluate` scores a loaded team; `run_eval` resolves what `pettingllms eval TARGET` names (a
run directory, a checkpoint folder or a spec file), loads it and scores it.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch

from pettingllms_cli import distributed
from pettingllms_cli.analysis.stats import wilson_interval
from pettingllms_cli.envs import ENVS, Problem, TurnEnv
from pettingllms_cli.envs.loading import load_split
from pettingllms_cli.errors import UserError
from pettingllms_cli.policy.adapters import Team, logprob_key
from pettingllms_cli.rollout.tree import Sample, tree_rollout
from pettingllms_cli.spec import Experiment

_TMP_RE = re.compile(r"^step_\d+\.tmp-\d+$")  # a checkpoint write that never finished


def make_envs(spec: Experiment, problems: list[Problem]) -> list[TurnEnv]:
    env_cls = ENVS[spec.env.name]
    return [env_cls(p, spec.env.layout, spec.env.max_turns, spec.env.options) for p in problems]


def episode_metrics(episodes: list[TurnEnv]) -> dict[str, float | None]:
    """Success, attempts and turns; with the intent protocol, `intent_agreement` over all actions taken after an intent.

    `team_success_rate` is the share solved within the budget (`max_turns`); `mean_attempts_to_success`
    averages over the solved episodes only (None when none was solved), so unsolved episodes are
    never folded in as if solved at the last attempt (docs/metrics.md).
    """
    n = max(len(episodes), 1)
    solved = [e.attempts for e in episodes if e.success and e.attempts is not None]
    metrics = {
        "team_success_rate": sum(e.success for e in episodes) / n,
        "mean_attempts_to_success": sum(solved) / len(solved) if solved else None,
        "solved_episodes": len(solved),
        "mean_turns": sum(min(e.turn + (e.next_role > 0), e.max_turns) for e in episodes) / n,
    }
    checks = [agreed for e in episodes for agreed in e.intent_checks]
    if checks:
        metrics["intent_agreement"] = sum(checks) / len(checks)
    return metrics


def agent_rewards(samples: list[Sample]) -> dict[str, float]:
    """Mean reward of each agent's actions, keyed `reward/<agent>`.

    >>> from types import SimpleNamespace as S
    >>> agent_rewards([S(agent="a", reward=1.0), S(agent="a", reward=0.0), S(agent="b", reward=0.5)])
    {'reward/a': 0.5, 'reward/b': 0.5}
    """
    by_agent: dict[str, list[float]] = defaultdict(list)
    for s in samples:
        by_agent[s.agent].append(s.reward)
    return {f"reward/{a}": sum(r) / len(r) for a, r in sorted(by_agent.items())}


@torch.inference_mode()
def action_logprobs(team: Team, samples: list[Sample], recorded: dict[tuple, float] | None = None) -> dict[str, float]:
    """Mean per-token log-probability each agent's policy gives the actions it took, `action_logprob/<agent>`.

    A continuous fingerprint of the policy: it moves with any adapter change, even when the
    decoded text (and so success) does not. Actions whose log-prob was recorded while they were
    sampled (`Team.recording_logprobs`) are read from `recorded`; the others get one left-padded
    forward per base, each row through its agent's adapter (PEFT mixed-adapter batch), with logits
    only for the last (completion) positions.
    """
    recorded = recorded or {}
    by_base: dict[str, list[Sample]] = defaultdict(list)
    means: dict[str, list[float]] = defaultdict(list)
    for s in samples:
        key = logprob_key(team.spec.adapter_of(s.agent), s.prompt, s.completion)
        if key in recorded:
            means[s.agent].append(recorded[key])
        elif len(s.completion) > 0:
            by_base[team.spec.base_of(s.agent)].append(s)
    for key, own in sorted(by_base.items()):
        model = team.models[key]
        was_training = model.training
        model.eval()  # PEFT accepts adapter_names only in eval mode
        seqs = [s.prompt + s.completion.tolist() for s in own]
        width, tail = max(map(len, seqs)), max(len(s.completion) for s in own)
        pad = team.tokenizers[key].pad_token_id
        ids = torch.tensor([[pad] * (width - len(q)) + q for q in seqs])  # [N, L]
        mask = torch.tensor([[0] * (width - len(q)) + [1] * len(q) for q in seqs])  # [N, L]
        ids, mask = ids.to(model.device), mask.to(model.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        adapters = [team.spec.adapter_of(s.agent) for s in own]
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=tail + 1, adapter_names=adapters)
        model.train(was_training)
        logp = torch.log_softmax(out.logits[:, :-1].float(), dim=-1).gather(-1, ids[:, -tail:, None]).squeeze(-1)  # [N, tail]
        for i, s in enumerate(own):
            means[s.agent].append(float(logp[i, tail - len(s.completion) :].mean()))
    return {f"action_logprob/{agent}": sum(m) / len(m) for agent, m in sorted(means.items())}


def tool_call_validity(transcripts: list[list[dict]]) -> dict[str, float]:
    """Per role, the share of its tool calls that parsed and ran (`tool_call`) vs failed (`tool_error`).

    Roles that never attempt a tool (no such keys in their transcript entries) are left out.

    >>> tool_call_validity([[{"role": "caller", "tool_call": "1+1 = 2"}, {"role": "caller", "tool_error": "bad"},
    ...                      {"role": "verifier", "answer": 2.0}]])
    {'tool_call_validity/caller': 0.5}
    """
    valid: dict[str, list[bool]] = defaultdict(list)
    for transcript in transcripts:
        for entry in transcript:
            if "tool_call" in entry or "tool_error" in entry:
                valid[entry["role"]].append("tool_call" in entry)
    return {f"tool_call_validity/{r}": sum(v) / len(v) for r, v in sorted(valid.items())}


def episode_record(env: TurnEnv) -> dict:
    """What one episode did, compactly: outcome and each action's text (to diff two policies)."""
    return {
        "id": env.problem.id,
        "question": env.problem.question,  # ids repeat across seeds and files; the content says what was scored
        "success": env.success,
        "attempts": env.attempts,
        "actions": [t["text"] for t in env.transcript],
    }


def pick_transcripts(episodes: list[TurnEnv], n: int) -> list[dict]:
    """Up to n episode states for reports, solved ones first, so a reader sees what success looks like."""
    ordered = sorted(episodes, key=lambda e: not e.success)
    return [e.state() for e in ordered[:n]]


def evaluate(
    team: Team,
    spec: Experiment,
    problems: list[Problem],
    batch_size: int = 32,  # decoding on a CPU is bound by reading the weights: more rows per step cost little
    temperature: float | None = None,
    seed: int = 0,
    n_transcripts: int = 3,
    score_actions: bool = True,
) -> dict:
    """One episode per problem (greedy, or sampled at `temperature` from `seed`), batched.

    Returns success with its 95% Wilson interval, attempts, turns, per-agent reward and action
    log-probability (`score_actions`), per-role tool-call validity, tokens, seconds, per-episode
    outcomes and a few transcripts.
    """
    if temperature is not None:
        spec = spec.model_copy(update={"train": spec.train.model_copy(update={"temperature": temperature})})
    start = time.perf_counter()
    episodes: list[TurnEnv] = []
    samples: list[Sample] = []
    tokens = 0
    mine = distributed.shard(problems)  # each rank scores its share; gathered back in order below
    assignment = team.roles.best()  # static roles, or the best the run's role assignment found
    recording = team.recording_logprobs() if score_actions else nullcontext({})  # log-probs from the decode itself
    with torch.random.fork_rng(), recording as recorded:  # eval must not move the training RNG
        for i in range(0, len(mine), batch_size):
            torch.manual_seed(seed)  # per batch: with per-problem draws, a problem's episode ignores its batch
            envs = make_envs(spec, mine[i : i + batch_size])
            rollout = tree_rollout(team, spec, envs, k=1, greedy=temperature is None, assignment=[assignment] * len(envs))
            episodes += rollout.episodes
            samples += rollout.samples
            tokens += rollout.tokens
    episodes, samples = distributed.gather(episodes), distributed.gather(samples)
    recorded = {key: value for part in distributed.gather([recorded]) for key, value in part.items()}
    tokens = int(distributed.all_reduce_sum([tokens])[0])
    successes = sum(e.success for e in episodes)
    return {
        **episode_metrics(episodes),
        "team_success_ci": list(wilson_interval(successes, len(episodes))),
        "successes": successes,
        "episodes": len(episodes),
        **agent_rewards(samples),
        **(action_logprobs(team, samples, recorded) if score_actions else {}),
        **tool_call_validity([e.transcript for e in episodes]),
        "tokens_generated": tokens,
        "seconds": round(time.perf_counter() - start, 3),
        "decoding": "greedy" if temperature is None else f"temperature={temperature}",
        "assignment": assignment,
        "per_episode": [episode_record(e) for e in episodes],
        "transcripts": pick_transcripts(episodes, n_transcripts),
    }


# --- what `pettingllms eval TARGET` names ------------------------------------------------------
@dataclass
class Target:
    spec: Experiment
    checkpoint: Path | None  # None: the untrained base models
    kind: str  # "run" | "checkpoint" | "spec"


def resolve_target(path: Path) -> Target:
    """A spec file, a run directory (its newest complete checkpoint) or one checkpoint folder."""
    from pettingllms_cli.spec import load_spec
    from pettingllms_cli.training.checkpoint import STATE_FILE, complete_checkpoints

    if path.is_file():
        return Target(load_spec(path), None, "spec")
    if not path.is_dir():
        raise UserError(f"{path}: no such file or directory; pass a run directory, a checkpoint folder or a spec file")
    if (path / "spec.yaml").is_file() and not _looks_like_checkpoint(path):
        found = complete_checkpoints(path)
        if not found:
            raise UserError(
                f"{path}: the run has no complete checkpoint (interrupted before the first save?); "
                f"resume it with `pettingllms train --resume`, or evaluate {path / 'spec.yaml'} for the untrained base"
            )
        spec = load_spec(path / "spec.yaml")
        return Target(spec, _check_adapters(spec, found[-1][1]), "run")
    if _looks_like_checkpoint(path):
        spec_file = path.parent.parent / "spec.yaml"
        if _TMP_RE.match(path.name) or not (path / STATE_FILE).is_file():
            why = "an unfinished write" if _TMP_RE.match(path.name) else f"no {STATE_FILE}"
            raise UserError(f"{path}: partial checkpoint ({why}); use a complete step_N folder or the run directory")
        if not spec_file.is_file():
            raise UserError(f"{path}: checkpoint without its run's spec.yaml at {spec_file}; evaluate the run directory instead")
        spec = load_spec(spec_file)
        return Target(spec, _check_adapters(spec, path), "checkpoint")
    raise UserError(
        f"{path}: not a run directory (no spec.yaml) nor a checkpoint folder; "
        "pass a run directory, checkpoints/step_N or a spec file"
    )


def _check_adapters(spec: Experiment, folder: Path) -> Path:
    """Fail before any weight loads when the checkpoint cannot serve the spec: agents named otherwise, an
    adapter file missing or damaged, or a spec.yaml edited since (another LoRA rank or model)."""
    from pettingllms_cli.training.checkpoint import adapter_problem, check_agent_names, weights_spec_changes

    check_agent_names(folder, sorted(spec.agents))
    problem = adapter_problem(folder, sorted(spec.agents))
    if problem:
        raise UserError(f"{folder}: {problem}; use an earlier complete step_N folder")
    changed = weights_spec_changes(spec.model_dump(mode="json"), folder)
    if changed:
        raise UserError(
            f"{folder}: the run's spec.yaml differs from the spec this checkpoint was trained with ({'; '.join(changed[:3])}); "
            "restore spec.yaml"
        )
    return folder


def _looks_like_checkpoint(path: Path) -> bool:
    from pettingllms_cli.training.checkpoint import STATE_FILE

    return (path / STATE_FILE).is_file() or path.name.startswith("step_") or path.parent.name == "checkpoints"


def eval_problems(spec: Experiment, split: str, seed: int, n: int) -> list[Problem]:
    """The problems an eval scores: the env's split of `spec.env.data`, seeded; unusable data is a UserError."""
    return load_split(spec.env.name, spec.env.data, split, seed, n, spec.env.options)


def run_eval(
    target: Path,
    data: str | None = None,
    split: str = "test",
    episodes: int | None = None,
    seed: int | None = None,
    temperature: float | None = None,
) -> dict:
    """Resolve, load and score TARGET; the result adds what was scored to `evaluate`'s dict."""
    from pettingllms_cli.training.checkpoint import load_adapters, read_state

    resolved = resolve_target(target)
    spec = resolved.spec
    if data is not None:
        spec = spec.model_copy(update={"env": spec.env.model_copy(update={"data": data})})
    seed = spec.seed if seed is None else seed  # default: the problems train scored before and after
    problems = eval_problems(spec, split, seed, episodes or spec.env.eval_problems)  # before any weight loads
    team = Team(spec)
    if resolved.checkpoint is not None:
        load_adapters(team, resolved.checkpoint)
        team.roles.load_state_dict(read_state(resolved.checkpoint).get("roles"))  # who plays which role best
    result = evaluate(team, spec, problems, temperature=temperature, seed=seed)
    step = resolved.checkpoint.name.removeprefix("step_") if resolved.checkpoint else "0"
    return {
        "target": str(target),
        "kind": resolved.kind,
        "checkpoint": str(resolved.checkpoint) if resolved.checkpoint else None,
        "step": int(step) if step.isdigit() else None,
        "spec": spec.name,
        "env": spec.env.name,
        "data": spec.env.data,
        "split": split,
        "seed": seed,
        **result,
    }
