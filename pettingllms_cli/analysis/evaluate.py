"""Score the team on fixed problems: one episode per problem, greedy by default.

`evaluate` scores a loaded team; training/eval_target.py resolves what `pettingllms eval TARGET`
names (a run directory, a checkpoint folder or a spec file), loads it and calls `evaluate`.
"""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import nullcontext

import torch

from pettingllms_cli import distributed
from pettingllms_cli.analysis.rollout_settings import evaluation_settings
from pettingllms_cli.analysis.stats import wilson_interval
from pettingllms_cli.envs import Problem
from pettingllms_cli.envs.loading import load_split
from pettingllms_cli.policy.adapters import Team
from pettingllms_cli.policy.logprobs import logprob_key, pad
from pettingllms_cli.policy.row_lora import per_row_lora
from pettingllms_cli.rollout.collect import rollout
from pettingllms_cli.rollout.episodes import Episode, episode_metrics, make_envs
from pettingllms_cli.rollout.records import Sample
from pettingllms_cli.spec import Experiment


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
    forward per base, each row through its agent's adapter (PEFT mixed-adapter batch, policy/row_lora.py), with logits
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
        tail = max(len(s.completion) for s in own)
        ids, mask = pad(seqs, team.tokenizers[key].pad_token_id, side="left")  # [N, L]: completions end aligned
        ids, mask = ids.to(model.device), mask.to(model.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        adapters = [team.spec.adapter_of(s.agent) for s in own]
        with per_row_lora(model, adapters, model.dtype):  # each LoRA layer one masked product over the adapters
            out = model(
                input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=tail + 1, adapter_names=adapters
            )
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
            if entry.get("replayed"):  # a refused call the episode started at (env option refused_calls): not the policy's
                continue
            if "tool_call" in entry or "tool_error" in entry:
                valid[entry["role"]].append("tool_call" in entry)
    return {f"tool_call_validity/{r}": sum(v) / len(v) for r, v in sorted(valid.items())}


def episode_record(episode: Episode) -> dict:
    """What one episode did: outcome and each action's text (to diff two policies), and the whole transcript (each
    role's action with what the env made of it: tool results, verdicts), so a report can show the same problem before
    and after training."""
    return {
        "id": episode.id,
        "question": episode.question,  # ids repeat across seeds and files; the content says what was scored
        "success": episode.success,
        "attempts": episode.attempts,
        "actions": [t["text"] for t in episode.transcript if not t.get("replayed")],  # the policy's own, not a replayed start
        "transcript": episode.transcript,
    }


def pick_transcripts(episodes: list[Episode], n: int) -> list[dict]:
    """Up to n episode states for reports, solved ones first, so a reader sees what success looks like."""
    ordered = sorted(episodes, key=lambda e: not e.success)
    return [e.state for e in ordered[:n]]


def evaluate(
    team: Team,
    spec: Experiment,
    problems: list[Problem],
    batch_size: int = 32,  # decoding on a CPU is bound by reading the weights: more rows per step cost little
    temperature: float | None = None,
    seed: int = 0,
    n_transcripts: int = 3,
    score_actions: bool = True,
    assignment: dict[str, str] | None = None,
) -> dict:
    """One episode per problem (greedy, or sampled at `temperature` from `seed`), batched.

    Returns success with its 95% Wilson interval, attempts, turns, per-agent reward and action
    log-probability (`score_actions`), per-role tool-call validity, tokens, seconds, per-episode
    outcomes and a few transcripts. `assignment` (role -> agent) defaults to the spec's own roles;
    training passes the best its role assignment found (rollout/roles.py).
    """
    settings = evaluation_settings(spec, temperature)
    start = time.perf_counter()
    episodes: list[Episode] = []
    samples: list[Sample] = []
    tokens = 0
    mine = distributed.shard(problems)  # each rank scores its share; gathered back in order below
    assignment = assignment or spec.role_owner()  # static roles, or the best the run's role assignment found
    recording = team.recording_logprobs() if score_actions else nullcontext({})  # log-probs from the decode itself
    with torch.random.fork_rng(), recording as recorded:  # eval must not move the training RNG
        for i in range(0, len(mine), batch_size):
            torch.manual_seed(seed)  # per batch: with per-problem draws, a problem's episode ignores its batch
            envs = make_envs(settings, mine[i : i + batch_size])
            played = rollout(team, settings, envs, k=1, greedy=temperature is None, assignment=[assignment] * len(envs))
            episodes += played.episodes
            samples += played.samples
            tokens += played.tokens
    episodes, samples = distributed.gather(episodes), distributed.gather(samples)
    recorded = {key: value for part in distributed.gather([recorded]) for key, value in part.items()}
    tokens = int(distributed.all_reduce_sum([tokens])[0])
    successes = sum(e.success for e in episodes)
    return {
        **episode_metrics(episodes),
        "team_success_ci": list(wilson_interval(successes, len(episodes))),
        # solved at an attempt after the first: a retry that worked (every success, for episodes started at a refusal)
        "solved_at_later_attempt_rate": sum(e.success and (e.attempts or 0) > 1 for e in episodes) / max(len(episodes), 1),
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


def eval_problems(spec: Experiment, split: str, seed: int, n: int) -> list[Problem]:
    """The problems an eval scores: the env's split of `spec.env.data`, seeded; unusable data is a UserError."""
    return load_split(spec.env.name, spec.env.data, split, seed, n, spec.env.options)
