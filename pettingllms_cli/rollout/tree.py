"""Rollouts: turn the team's policies loose on a batch of envs and record scored samples.

`tree` (AT-GRPO): at each (turn, role), K candidates per env, each stepped on a copy of the
env; the K share one prompt and form the group (problem, role, turn); the episode continues
from the best branch. Roles act in turn order, so role i+1 sees role i's chosen action.
The candidates of a role whose effect comes later (`deferred_roles`; every role under
`reward.team_signal: turn_end`) get the team reward their branch reaches at the end of the turn,
when one sample per later role plays it on (`play_out`; credit.py has the design and its token
cost); the play-outs are scored, not trained, and the groups stay (problem, role, turn).
Each episode has its own role -> agent assignment (roles.py); the default is the static one.
`parallel`: K independent episodes per problem; an agent's samples are scored by their
episode's final reward and grouped by (problem, agent).

Each episode is played as a `Play` (coordination.py): its env with the intent protocol's state.
With `coordination.protocol: intent`, each turn opens with an intent round (coordination.py):
every role declares, in turn order, one sample per episode, before any role acts. Under
`parallel` those declarations are part of the agent's episode and trained with its reward
(`Rollout.intents`); under `tree` they condition the turn's groups but are not trained (one
intent per episode and turn gives a group of one, with no signal).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from pettingllms_cli.envs.base import Message, StepResult, TurnEnv
from pettingllms_cli.envs.messages import action_text
from pettingllms_cli.envs.review import DUE
from pettingllms_cli.policy.sampler import Sampler
from pettingllms_cli.policy.sampling import base_seed, row_seed
from pettingllms_cli.rollout import coordination
from pettingllms_cli.rollout.coordination import Play
from pettingllms_cli.rollout.credit import NOOP, combine, local_term, plays_on
from pettingllms_cli.rollout.episodes import Episode, record
from pettingllms_cli.rollout.external import external_rollout
from pettingllms_cli.rollout.records import Rollout, Sample
from pettingllms_cli.rollout.roles import Assignment
from pettingllms_cli.spec import Experiment

Candidates = list[tuple[str, torch.Tensor]]  # (text, ids) of each sampled continuation


def _act(
    team: Sampler,
    spec: Experiment,
    observations: list[list[Message]],
    agents: list[str],
    k: int,
    greedy: bool,
    rollout: Rollout,
    seeds: list[int] | None = None,
    max_new_tokens: int | None = None,
) -> list[tuple[list[int], Candidates]]:
    """Sample k continuations of each observation by its agent; (prompt, candidates) each.

    Agents on one base share one batched generate, each row through its own adapter (`Sampler.sample_mixed`).
    Observation i's draws come from seeds[i] alone (sampling.py), whatever else shares the batch or the rank.
    """
    t = spec.train
    prompts = [team.encode(agent, obs) for agent, obs in zip(agents, observations, strict=True)]
    completions = team.sample_mixed(agents, prompts, k, max_new_tokens or t.max_new_tokens, t.temperature, greedy, seeds)
    acted = []
    for agent, obs, prompt, cands in zip(agents, observations, prompts, completions, strict=True):
        rollout.tokens += sum(len(c) for c in cands)
        texts = [action_text(obs, team.decode(agent, c)) for c in cands]
        acted.append((prompt, list(zip(texts, cands, strict=True))))
    return acted


def _declare_intents(
    team: Sampler,
    spec: Experiment,
    plays: list[Play],
    agents_of: list[Assignment],
    seed_keys: list[tuple],
    turn: int,
    greedy: bool,
    rollout: Rollout,
) -> list[list[Sample]]:
    """The intent round of a turn: each role, in turn order, declares in every unfinished episode; returns its declarations.

    Episode i's intent draws are seeded by (seed_keys[i], role, turn), like its actions (sampling.py).
    """
    declared: list[list[Sample]] = [[] for _ in plays]
    if spec.coordination.protocol != "intent":
        return declared
    active = [i for i, play in enumerate(plays) if not play.done]
    for role in plays[0].env.roles if plays else ():
        observations = [coordination.intent_prompt(plays[i].env.observe(role), plays[i].intents) for i in active]
        agents = [agents_of[i][role] for i in active]
        seeds = [row_seed(*seed_keys[i], role, turn, "intent") for i in active]
        acted = _act(team, spec, observations, agents, 1, greedy, rollout, seeds, spec.coordination.intent_tokens)
        rollout.intent_actions += len(active)
        for i, obs, agent, (prompt, [(text, ids)]) in zip(active, observations, agents, acted, strict=True):
            play, env = plays[i], plays[i].env
            play.declare(role, coordination.extract(text))
            declared[i].append(_sample(agent, role, env.turn, (env.problem.id, agent), prompt, ids, text, obs))
    return declared


def _local(spec: Experiment, res: StepResult, team: float, noop: float | None) -> float:
    """The action's credited local term, plus the agreement bonus when it did what its intent said."""
    return local_term(res.local_reward, team, noop) + spec.coordination.agreement_bonus * float(
        res.info.get("intent_agrees", False)
    )


def play_out(
    team: Sampler,
    spec: Experiment,
    starts: list[tuple[Play, StepResult]],
    agents_of: list[Assignment],
    seed_of: Callable[[int, str], int],
    later: tuple[str, ...],
    greedy: bool,
    rollout: Rollout,
) -> tuple[list[float], list[bool]]:
    """The team reward each start (a branch and the result of its last step) has at the end of its turn, and
    whether the team had solved the problem by then.

    Each start is played on, on a copy, by one sample of each of the `later` roles of the turn; every
    start's action of one role comes from one batched generate. Start j's draws for `role` come from
    `seed_of(j, role)`: starts of one problem share it, so their outcomes differ only through their state.
    """
    outcome = [res.team_reward for _, res in starts]
    probes = [play.copy() for play, _ in starts] if later else [play for play, _ in starts]
    before = rollout.tokens
    for role in later:
        live = [j for j, probe in enumerate(probes) if not probe.done]
        if not live:
            break
        observations = [probes[j].view(role) for j in live]
        agents = [agents_of[j][role] for j in live]
        acted = _act(team, spec, observations, agents, 1, greedy, rollout, [seed_of(j, role) for j in live])
        rollout.lookahead_actions += len(live)
        for j, (_, [(text, _)]) in zip(live, acted, strict=True):
            outcome[j] = probes[j].step(role, text).team_reward
    rollout.lookahead_tokens += rollout.tokens - before
    return outcome, [probe.env.success for probe in probes]


def _sample(
    agent, role, turn, group, prompt, ids, text, obs, res: StepResult | None = None, local=0.0, reward=0.0, team=None
) -> Sample:
    """One action of `role` at `turn` (an intent when there is no StepResult); group[0] is the problem id.

    `team`: the credited team term when it is not the team reward right after the action (a play-out's).
    """
    team_reward, env_local = (res.team_reward, res.local_reward) if res is not None else (0.0, 0.0)
    team_reward = team_reward if team is None else team
    due = res.info.get(DUE) if res is not None else None
    return Sample(
        agent, role, turn, group[0], group, prompt, ids, text, reward, team_reward, local, 0.0, env_local, obs, verdict_due=due
    )


def _stepped(play: Play, role: str, text: str) -> tuple[Play, StepResult]:
    """A copy of the episode after `role` plays `text`, and that step's result (`play` itself is untouched)."""
    branch = play.copy()
    return branch, branch.step(role, text)


def _play_out_seeds(base: int, problem_ids: list[str], role: str, turn: int) -> Callable[[int, str], int]:
    """Seeds of the play-outs after `role`'s candidates: one per (problem, later role), shared by its candidates and no-op."""
    return lambda j, later: row_seed(base, problem_ids[j], role, turn, "play_out", later)


def _tree_step(
    team: Sampler,
    spec: Experiment,
    plays: list[Play],
    role: str,
    later: tuple[str, ...],
    turn: int,
    k: int,
    greedy: bool,
    base: int,
    rollout: Rollout,
) -> None:
    """One (turn, role) of tree sampling: K candidates per unfinished episode, each scored by the team outcome its
    branch reaches (played on by the `later` roles), and each episode replaced by its best branch."""
    active = [i for i, play in enumerate(plays) if not play.done]
    observations = [plays[i].view(role) for i in active]
    agents = [rollout.assignment[i][role] for i in active]
    seeds = [row_seed(base, plays[i].env.problem.id, role, turn) for i in active]
    acted = _act(team, spec, observations, agents, k, greedy, rollout, seeds)
    branches = [[_stepped(plays[i], role, text) for text, _ in cands] for i, (_, cands) in zip(active, acted, strict=True)]
    noops = [_stepped(plays[i], role, NOOP) for i in active] if spec.reward.credit == "difference" else []
    starts = [b for per_env in branches for b in per_env] + noops  # every candidate of every episode, then the no-ops
    owner = [i for i, per_env in zip(active, branches, strict=True) for _ in per_env] + (active if noops else [])
    seed_of = _play_out_seeds(base, [plays[i].env.problem.id for i in owner], role, turn)
    outcome, solved = play_out(team, spec, starts, [rollout.assignment[i] for i in owner], seed_of, later, greedy, rollout)
    noop_of = dict(zip(active, outcome[len(outcome) - len(noops) :], strict=True)) if noops else {}
    at = 0
    for i, obs, agent, (prompt, candidates), stepped in zip(active, observations, agents, acted, branches, strict=True):
        rewards = []
        for (text, ids), (_, res) in zip(candidates, stepped, strict=True):
            team_term, success, at = outcome[at], solved[at], at + 1
            local = _local(spec, res, team_term, noop_of.get(i))
            reward = combine(spec, team_term, local)
            group = (plays[i].env.problem.id, role, turn)
            rollout.samples.append(_sample(agent, role, turn, group, prompt, ids, text, obs, res, local, reward, team_term))
            rollout.samples[-1].team_success = success
            rewards.append(reward)
        plays[i] = stepped[max(range(len(rewards)), key=rewards.__getitem__)][0]  # continue from the best branch


def tree_rollout(
    team: Sampler, spec: Experiment, envs: list[TurnEnv], k: int, greedy: bool = False, assignment: list[Assignment] | None = None
) -> Rollout:
    """AT-GRPO tree sampling over a batch of envs (k=1 with greedy=True is a plain greedy episode)."""
    if not envs:  # a rank whose shard of the step is empty (fewer problems than ranks)
        return Rollout(assignment=[])
    if spec.env.name == "external":  # the user's program plays: K episodes of it per problem (rollout/external.py)
        return external_rollout(team, spec, envs, k, greedy, assignment)
    rollout = Rollout(assignment=assignment or [spec.role_owner() for _ in envs])
    plays = [Play(env) for env in envs]  # the caller's envs are only copied, never stepped
    base = base_seed()  # alike on every rank; each problem's draws are keyed by its id, not its batch slot
    for turn in range(spec.env.max_turns):
        keys = [(base, play.env.problem.id) for play in plays]
        _declare_intents(team, spec, plays, rollout.assignment, keys, turn, greedy, rollout)
        roles = envs[0].roles
        for r, role in enumerate(roles):
            if all(play.done for play in plays):
                break
            later = roles[r + 1 :] if plays_on(spec, k, role, envs[0]) else ()  # the roles that play a branch on
            _tree_step(team, spec, plays, role, later, turn, k, greedy, base, rollout)
    rollout.episodes = [record(play) for play in plays]
    return rollout


def _parallel_noops(
    team: Sampler,
    spec: Experiment,
    episodes: list[Play],
    active: list[int],
    role: str,
    later: tuple[str, ...],
    turn: int,
    base: int,
    k: int,
    rollout: Rollout,
) -> dict[int, float]:
    """Under `difference`: each active episode's no-op team outcome for `role`, {} otherwise.

    With `turn_end` the no-op is played on with the seeds of the episode's own later actions, so it
    differs from the episode only through the action it replaces.
    """
    if spec.reward.credit != "difference":
        return {}
    noops = [_stepped(episodes[i], role, NOOP) for i in active]
    ids = [episodes[i].env.problem.id for i in active]
    seed_of = lambda j, later_role: row_seed(base, ids[j], later_role, turn, active[j] % k)  # noqa: E731  the episode's own draw
    later = later if plays_on(spec, k, role, episodes[0].env) else ()
    outcome, _ = play_out(team, spec, noops, [rollout.assignment[i] for i in active], seed_of, later, False, rollout)
    return dict(zip(active, outcome, strict=True))


def parallel_rollout(
    team: Sampler, spec: Experiment, envs: list[TurnEnv], k: int, assignment: list[Assignment] | None = None
) -> Rollout:
    """K independent episodes per env; each agent's samples (and intents) get their episode's final reward."""
    if not envs:
        return Rollout(assignment=[])
    if spec.env.name == "external":  # the user's program plays (rollout/external.py)
        return external_rollout(team, spec, envs, k, assignment=assignment)
    per_problem = assignment or [spec.role_owner() for _ in envs]
    rollout = Rollout(assignment=[a for a in per_problem for _ in range(k)])
    episodes = [Play(env.copy()) for env in envs for _ in range(k)]
    base = base_seed()
    per_episode: list[list[Sample]] = [[] for _ in episodes]
    intents: list[list[Sample]] = [[] for _ in episodes]
    for turn in range(spec.env.max_turns):
        keys = [(base, play.env.problem.id, i % k) for i, play in enumerate(episodes)]  # i % k: episode of its problem
        declared = _declare_intents(team, spec, episodes, rollout.assignment, keys, turn, False, rollout)
        for i, own in enumerate(declared):
            intents[i] += own
        roles = envs[0].roles
        turn_end = [0.0] * len(episodes)  # each episode's team reward after its latest action of this turn
        pending: list[tuple[int, Sample, StepResult, float]] = []  # difference credit settled at the turn's end
        for r, role in enumerate(roles):
            active = [i for i, play in enumerate(episodes) if not play.done]
            if not active:
                break
            observations = [episodes[i].view(role) for i in active]
            agents = [rollout.assignment[i][role] for i in active]
            seeds = [row_seed(base, episodes[i].env.problem.id, role, turn, i % k) for i in active]  # i % k: its episode
            acted = _act(team, spec, observations, agents, 1, False, rollout, seeds)
            noop_of = _parallel_noops(team, spec, episodes, active, role, roles[r + 1 :], turn, base, k, rollout)
            for i, obs, agent, (prompt, [(text, ids)]) in zip(active, observations, agents, acted, strict=True):
                play, env = episodes[i], episodes[i].env
                res = play.step(role, text)
                turn_end[i] = res.team_reward
                sample = _sample(agent, role, turn, (env.problem.id, agent), prompt, ids, text, obs, res)
                sample.local_reward = _local(spec, res, res.team_reward, noop_of.get(i))
                per_episode[i].append(sample)
                if i in noop_of and plays_on(spec, k, role, env):
                    pending.append((i, sample, res, noop_of[i]))
        for i, sample, res, noop in pending:  # the action's team outcome: the episode's team reward at the turn's end
            sample.local_reward = _local(spec, res, turn_end[i], noop)
    for env, samples, declared in zip([play.env for play in episodes], per_episode, intents, strict=True):
        for agent in {s.agent for s in samples}:
            own = [s for s in samples if s.agent == agent]
            local = sum(s.local_reward for s in own) / len(own)
            for s in own + [d for d in declared if d.agent == agent]:
                s.reward = combine(spec, float(env.success), local)
                s.team_success = env.success
        rollout.samples += samples
        rollout.intents += declared
    rollout.episodes = [record(play) for play in episodes]
    return rollout


def on_policy_episodes(
    team: Sampler, spec: Experiment, envs: list[TurnEnv], tree: Rollout, greedy: bool = False
) -> tuple[list[Episode], int]:
    """One episode per env (fresh, unstepped) played by the policy itself, reusing the tree's draws where it can.

    The tree's episode keeps the best of K candidates at every action, so its success is best-of-K,
    not what the policy does. Here each env is played with one sample per action: while the episode
    is in a state the tree sampled from (same prompt, same problem, role and turn), it takes that
    group's first candidate, itself a plain sample of the policy there; once it leaves the tree's
    path it samples its own action (seeded per problem, role and turn). A one-role, one-turn episode
    costs nothing extra; otherwise only the actions off the tree's path are generated. Returns the
    episodes and the tokens generated for them. Under the intent protocol every intent is sampled anew.
    """
    if spec.env.name == "external":  # the program's K episodes are already the policy's own
        return tree.episodes, 0
    first: dict[tuple, Sample] = {}
    for s in tree.samples:
        first.setdefault((s.problem_id, s.role, s.turn), s)
    episodes, tokens = [Play(env.copy()) for env in envs], 0
    with torch.random.fork_rng():  # the step's RNG stream is left as the tree left it
        base = base_seed()
    scratch = Rollout(assignment=tree.assignment)
    for turn in range(spec.env.max_turns):
        keys = [(base, play.env.problem.id, "on_policy") for play in episodes]
        _declare_intents(team, spec, episodes, tree.assignment, keys, turn, greedy, scratch)
        for role in envs[0].roles if envs else ():
            active = [i for i, play in enumerate(episodes) if not play.done]
            observations = [episodes[i].view(role) for i in active]
            agents = [tree.assignment[i][role] for i in active]
            prompts = [team.encode(agent, obs) for agent, obs in zip(agents, observations, strict=True)]
            texts: dict[int, str] = {}
            fresh = []
            for i, prompt in zip(active, prompts, strict=True):
                hit = first.get((episodes[i].env.problem.id, role, turn))
                if hit is not None and hit.prompt == prompt:
                    texts[i] = hit.text  # the tree sampled here: its first candidate is a policy sample
                else:
                    fresh.append(i)
            if fresh:
                rows = [active.index(i) for i in fresh]
                seeds = [row_seed(base, episodes[i].env.problem.id, role, turn, "on_policy") for i in fresh]
                t = spec.train
                got = team.sample_mixed(
                    [agents[r] for r in rows], [prompts[r] for r in rows], 1, t.max_new_tokens, t.temperature, greedy, seeds
                )
                for i, r, [ids] in zip(fresh, rows, got, strict=True):
                    tokens += len(ids)
                    texts[i] = action_text(observations[r], team.decode(agents[r], ids))
            for i in active:
                episodes[i].step(role, texts[i])
    return [record(play) for play in episodes], tokens + scratch.tokens
