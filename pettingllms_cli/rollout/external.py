"""External rollouts: the user's program plays each episode, calling the agents through the endpoint, and every
completion it gets becomes a trained action of the agent it named (docs/external.md).

For each problem K episodes of the program run (up to `concurrency` at once), each with a base URL whose path holds
its episode id. The gateway (gateway.py) samples each call through the rollout's sampler at the trainer's settings
(`train.temperature`, at most `train.max_new_tokens`, seeded by (step, problem, agent, call index, episode); greedy
when evaluating) and records its prompt ids and completion ids as sampled: nothing is re-tokenized.

Credit: the program's reward (or its answer, checked) is the team reward of every call in the episode; the per-call
`rewards` it may return are local rewards; r = team_weight * R_team + local_weight * r_local as for built-in envs.
Groups are (problem, agent, call index) over the K episodes: the i-th call an agent makes in an episode plays the same
part in each of them, so the K samples of a group answer comparable prompts.

A program that raises, runs past `timeout` or returns without calling fails its episode alone: the error is printed
and kept in the episode's state, its calls get `failure_reward` as team reward. When every episode fails there is
nothing to learn from and the program is most likely broken: the step stops with the first error (a UserError).
"""

from __future__ import annotations

import asyncio
import inspect
import math
import sys
import threading
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from pettingllms_cli.envs import Problem, TurnEnv
from pettingllms_cli.envs.external import ExternalOptions, answer_is_right, load_program
from pettingllms_cli.envs.messages import Message
from pettingllms_cli.errors import UserError
from pettingllms_cli.policy.sampler import Sampler
from pettingllms_cli.policy.sampling import base_seed, row_seed
from pettingllms_cli.rollout.chat import ApiError, ChatRequest, Completer, Completion, Settings
from pettingllms_cli.rollout.credit import combine
from pettingllms_cli.rollout.episodes import Episode
from pettingllms_cli.rollout.gateway import ServerThread, make_app
from pettingllms_cli.rollout.records import Rollout, Sample
from pettingllms_cli.rollout.roles import Assignment
from pettingllms_cli.rollout.settings import RolloutSettings


@dataclass
class Call:
    agent: str
    index: int  # the agent's how-many-th call in the episode, from 0
    id: str  # the completion's id: what per-call `rewards` are keyed by
    prompt: list[int]
    completion: torch.Tensor
    text: str
    messages: list[Message]


@dataclass
class Run:
    """One episode of the program."""

    problem: Problem
    slot: int  # which of the problem's K episodes
    calls: list[Call] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    running: bool = True
    value: Any = None
    error: str | None = None


class Book:
    """The running episodes the gateway serves (gateway.EpisodeBook), and how their calls are sampled."""

    def __init__(self, settings: RolloutSettings, base: int, greedy: bool):
        self.settings, self.base, self.greedy = settings, base, greedy
        self.runs: dict[str, Run] = {}
        self.lock = threading.Lock()

    def open(self, problem: Problem, slot: int) -> str:
        key = uuid.uuid4().hex[:16]
        with self.lock:
            self.runs[key] = Run(problem, slot)
        return key

    def close(self, key: str) -> Run:
        with self.lock:
            run = self.runs[key]
            run.running = False
        return run

    def begin(self, episode: str, agent: str, request: ChatRequest) -> tuple[int, Settings]:
        with self.lock:
            run = self.runs.get(episode)
            if run is None or not run.running:
                raise ApiError(404, f"episode {episode!r} is not running; use the base_url the trainer passed in")
            if request.n != 1:
                raise ApiError(400, "n: must be 1 while training: the K episodes of a problem are its samples", "n")
            index = run.counts.get(agent, 0)
            run.counts[agent] = index + 1
        most = self.settings.max_new_tokens
        asked = request.max_completion_tokens or request.max_tokens or most
        seed = row_seed(self.base, run.problem.id, agent, index, run.slot)
        return index, Settings(self.settings.temperature, min(asked, most), 1, seed, self.greedy)

    def record(self, episode: str, index: int, completion: Completion) -> None:
        [choice] = completion.choices
        call = Call(completion.agent, index, completion.id, completion.prompt, choice.ids, choice.text, completion.messages)
        with self.lock:
            run = self.runs[episode]
            if run.running:  # a call that finishes after its episode timed out is not the episode's
                run.calls.append(call)


def external_rollout(
    sampler: Sampler,
    settings: RolloutSettings,
    envs: list[TurnEnv],
    k: int,
    greedy: bool,
    assignment: list[Assignment],
) -> Rollout:
    """K episodes of the program per env's problem; their calls as samples, grouped by (problem, agent, call index)."""
    options = ExternalOptions.model_validate(settings.env_options)
    program = load_program(options.program)
    book = Book(settings, base_seed(), greedy)
    team = getattr(sampler, "team", sampler)  # the trainer's Team (tokenizers, log-probs) behind any sampler
    runs = [(book.open(env.problem, slot), env.problem) for env in envs for slot in range(k)]
    with ServerThread(make_app(Completer(team, sampler), book)) as server:
        play_all(program, book, runs, server.url, options)
    played = [book.runs[key] for key, _ in runs]
    failed = [run for run in played if run.error is not None]
    if len(failed) == len(played):
        raise UserError(
            f"env.options.program {options.program}: every episode failed; the first, on problem "
            f"{failed[0].problem.id!r}: {failed[0].error}"
        )
    credited = [credit(settings, options, run) for run in played]
    return Rollout(
        samples=[s for samples, _ in credited for s in samples],
        episodes=[episode for _, episode in credited],
        tokens=sum(len(call.completion) for run in played for call in run.calls),
        assignment=[a for a in assignment for _ in range(k)],
    )


def play_all(program: Any, book: Book, runs: list[tuple[str, Problem]], url: str, options: ExternalOptions) -> None:
    """Every episode, `options.concurrency` at a time, each in its own thread, each given up after `options.timeout`."""
    slots = threading.Semaphore(options.concurrency)

    def one(key: str, problem: Problem) -> None:
        with slots:
            value, error = call_program(program, problem, f"{url}/episodes/{key}/v1", options.timeout)
        run = book.close(key)
        run.value, run.error = value, error
        if error is None and not run.calls:
            run.error = f"the program returned without calling the agents (base_url {url}/episodes/{key}/v1)"
        if run.error is not None:
            print(f"external episode failed (problem {problem.id!r}): {run.error}", file=sys.stderr, flush=True)

    threads = [threading.Thread(target=one, args=run, daemon=True) for run in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def call_program(program: Any, problem: Problem, base_url: str, timeout: float) -> tuple[Any, str | None]:
    """What program(problem, base_url) returned, or (None, its error); a program still running after `timeout` is
    left behind in its daemon thread (a thread cannot be killed): its later calls get 404."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            out = program(asdict(problem), base_url)
            box["value"] = asyncio.run(out) if inspect.isawaitable(out) else out
        except BaseException as e:  # whatever the user's program raises fails its episode alone
            box["error"] = f"{type(e).__name__}: {e}"

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        return None, f"timed out after {timeout:g} s"
    return box.get("value"), box.get("error")


def outcome(value: Any, problem: Problem) -> tuple[float, bool, dict[str, float]]:
    """(team reward, success, per-call rewards) of what the program returned; a ValueError says what is wrong with it.

    A number is the reward (success: > 0); a string is the final answer, checked against the problem's; a dict holds
    `reward` or `answer`, and optionally `success` and `rewards` ({call id: local reward}).
    """
    if isinstance(value, bool):
        return float(value), value, {}
    if isinstance(value, int | float):
        return finite(value, "the reward"), value > 0, {}
    if isinstance(value, str):
        right = answer_is_right(value, problem.answer)
        return float(right), right, {}
    if not isinstance(value, dict):
        raise ValueError(f"returned {type(value).__name__}; return a reward, an answer, or a dict with `reward` or `answer`")
    per_call = value.get("rewards") or {}
    if not isinstance(per_call, dict):
        raise ValueError("`rewards` must map call ids (the completions' `id`) to numbers")
    local = {str(k): finite(v, f"rewards[{k!r}]") for k, v in per_call.items()}
    if "reward" in value:
        reward = finite(value["reward"], "reward")
        return reward, bool(value.get("success", reward > 0)), local
    if "answer" in value:
        right = answer_is_right(value["answer"], problem.answer)
        return float(right), bool(value.get("success", right)), local
    raise ValueError("returned a dict with neither `reward` nor `answer`")


def finite(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{what} must be a finite number, not {value!r}")
    return float(value)


def credit(settings: RolloutSettings, options: ExternalOptions, run: Run) -> tuple[list[Sample], Episode]:
    """The episode's calls as samples, and its record."""
    team_reward, success, local = options.failure_reward, False, {}
    if run.error is None:
        try:
            team_reward, success, local = outcome(run.value, run.problem)
        except ValueError as e:
            run.error = f"the program {e}"
            print(f"external episode failed (problem {run.problem.id!r}): {run.error}", file=sys.stderr, flush=True)
    problem, samples, transcript = run.problem, [], []
    for call in sorted(run.calls, key=lambda c: (c.agent, c.index)):
        role = settings.agent_roles[call.agent][0]
        r_local = local.get(call.id, 0.0)
        reward = combine(settings.reward, team_reward, r_local)
        group = (problem.id, call.agent, call.index)
        samples.append(
            Sample(agent=call.agent, role=role, turn=call.index, problem_id=problem.id, group=group, prompt=call.prompt,
                   completion=call.completion, text=call.text, reward=reward, team_reward=team_reward, local_reward=r_local,
                   env_local_reward=r_local, messages=call.messages, team_success=success)
        )  # fmt: skip
    for call in run.calls:  # in the order the program made them
        transcript.append({"turn": call.index, "role": call.agent, "text": call.text, "call": call.id})
    state = {"env": "external", "problem": asdict(problem), "success": success, "reward": team_reward, "error": run.error}
    state["transcript"] = transcript
    episode = Episode(
        id=problem.id, question=problem.question, success=success, attempts=1 if success else None, turns=len(run.calls),
        transcript=transcript, intent_checks=[], state=state,
    )  # fmt: skip
    return samples, episode
