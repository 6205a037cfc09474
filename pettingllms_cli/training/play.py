"""`pettingllms play`: one episode of a trained team on one problem, with the env's real tools.

The episode is the rollout evaluation plays (rollout/collect.py `rollout`, k=1: greedy, or sampled at a
temperature from a seed), so `play` shows exactly what `eval` scores; the record adds each action's prompt,
prefill and token ids, which an exported agent (training/export.py) reproduces outside pettingllms.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from pettingllms_cli.analysis.rollout_settings import evaluation_settings
from pettingllms_cli.envs import Problem
from pettingllms_cli.envs.base import DUE
from pettingllms_cli.envs.messages import generated_part, prefill
from pettingllms_cli.errors import UserError
from pettingllms_cli.rollout.collect import rollout
from pettingllms_cli.rollout.episodes import make_envs
from pettingllms_cli.rollout.records import Sample
from pettingllms_cli.training.play_problem import problem_of
from pettingllms_cli.training.trained import trained

# What an env's action info says of the reference answer; a free-text problem has none, so it is left out.
ANSWER_JUDGED = {"matches", DUE}


def play(
    run: Path | str,
    question: str | None = None,
    data: str | None = None,
    index: int | None = None,
    checkpoint: int | None = None,
    temperature: float | None = None,
    seed: int | None = None,
    functions: Path | str | None = None,
) -> dict:
    """Play one episode with RUN's trained team; returns its record (every role's prompt and action, the tools' results,
    the outcome). `functions`: with `question`, the file of functions a function-calling env's request may call."""
    if temperature is not None and not (math.isfinite(temperature) and temperature > 0):
        raise UserError(f"--temperature {temperature}: must be a finite number > 0; omit it for greedy decoding")
    found = trained(Path(run), checkpoint)
    spec = found.spec
    problem = problem_of(spec, question, data, index, None if functions is None else str(functions))  # before any weight loads
    known = question is None  # a data problem has a reference answer; free text has none
    seed = spec.seed if seed is None else seed
    settings = evaluation_settings(spec, temperature)
    team, assignment = found.team(), found.assignment()
    with torch.random.fork_rng():
        torch.manual_seed(seed)  # as evaluate seeds each batch
        played = rollout(team, settings, make_envs(settings, [problem]), k=1, greedy=temperature is None, assignment=[assignment])
    episode = played.episodes[0]
    steps = [entry for entry in episode.transcript if "role" in entry and "text" in entry]
    return {
        "run": str(found.run_dir or found.checkpoint),
        "checkpoint": str(found.checkpoint),
        "step": found.step,
        "env": spec.env.name,
        "layout": spec.env.layout,
        "decoding": "greedy" if temperature is None else f"temperature={temperature}",
        "seed": seed,
        "assignment": assignment,
        "problem": _problem(problem, known),
        "actions": _actions(played.samples, steps, known),
        "outcome": _outcome(episode, known),
    }


def _problem(problem: Problem, known: bool) -> dict:
    record = {"id": problem.id, "question": problem.question, "answer": _plain(problem.answer) if known else None}
    if "functions" in problem.meta:  # the function-calling envs: what the request may call
        record["functions"] = [f.get("name") for f in problem.meta["functions"]]
    return record


def _actions(samples: list[Sample], steps: list[dict], known: bool) -> list[dict]:
    """Each action: who took it, the prompt it saw, what it generated (text and token ids) and what the env made of it."""
    actions = []
    taken = iter(samples)
    for step in steps:
        # the env's transcript entry of each sampled action, in order (a sample of another kind, none in k=1 trees, is skipped)
        sample = next((s for s in taken if (s.turn, s.role) == (step["turn"], step["role"])), None)
        if sample is None:
            break
        left_out = {"turn", "role", "text"} | (set() if known else ANSWER_JUDGED)
        env_said = {k: v for k, v in step.items() if k not in left_out}
        actions.append(
            {
                "turn": sample.turn,
                "role": sample.role,
                "agent": sample.agent,
                "prompt": sample.messages,
                "prompt_ids": list(sample.prompt),  # the exact tokens the agent saw: an export rebuilds them from prompt.json
                "prefill": prefill(sample.messages),
                "generated": generated_part(sample.messages, sample.text),
                "action": sample.text,
                "tokens": [int(t) for t in sample.completion],
                "env": _plain(env_said),
            }
        )
    return actions


def _outcome(episode, known: bool) -> dict:
    return {
        "success": episode.success if known else None,  # None: no reference answer to check against
        "attempts": episode.attempts,
        "turns": episode.turns,
        "reference": "the data's answer" if known else "none (a free-text question)",
    }


def _plain(value):
    """JSON-ready: numbers that are not finite become None, containers recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value if isinstance(value, str | int | float | bool | type(None)) else str(value)


def show(record: dict, console, prompts: bool = False) -> None:
    """The episode as a transcript: each action (with its prompt on request), what the env made of it, the outcome."""
    from rich.markup import escape

    def say(text: str) -> None:  # model text as written (no highlighting), lines unbroken in a log
        console.print(text, highlight=False, soft_wrap=True)

    problem = record["problem"]
    say(f"[bold]{escape(record['env'])}[/bold] step {record['step']}, {record['decoding']}: {escape(problem['question'])}")
    if "functions" in problem:
        say(f"functions: {escape(', '.join(str(name) for name in problem['functions']))}")
    for action in record["actions"]:
        say(f"\n[bold cyan]turn {action['turn']} · {escape(action['role'])}[/bold cyan] ({escape(action['agent'])})")
        if prompts:
            for m in action["prompt"]:
                say(f"  [dim]{escape(m['role'])}: {escape(m['content'])}[/dim]")
        say(f"  {escape(action['action'])}")
        for key, value in action["env"].items():
            say(f"  [yellow]{escape(key)}[/yellow]: {escape(str(value))}")
    outcome = record["outcome"]
    verdict = {True: "[green]solved[/green]", False: "[red]not solved[/red]", None: "no reference answer to check"}
    say(f"\n{verdict[outcome['success']]} in {outcome['turns']} turn(s); reference: {escape(outcome['reference'])}")
