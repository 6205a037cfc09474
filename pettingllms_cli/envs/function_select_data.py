"""`function_select_v0`'s generated problems: BFCL `multiple`-style records drawn from a catalogue of functions.

The catalogue (data/function_select_catalogue.json) holds 24 training functions across nine domains and 12
unseen ones that no training problem offers. Each function has 1-3 arguments (string, integer, float, or a
string enum), every one required, a request template and pools of values; a problem fills the template, so
every argument's value appears in the request, and offers the right function and 3 distractors in a seeded
order. A problem is built as `load_bfcl` builds one from a BFCL file: `Problem(id, question, ground truth,
{"functions": [...]})`, the functions in BFCL's schema (`name`, `description`, `parameters`).

Splits: `train` and `test` draw from the training catalogue, a request on the test side of `in_test_fifth`
never in training; `unseen` (data `generated-unseen`'s test split) offers only unseen functions.
"""

from __future__ import annotations

import json
import random
from functools import cache
from pathlib import Path

from pettingllms_cli.envs.base import Problem, in_test_fifth

CATALOGUE = Path(__file__).parent / "data" / "function_select_catalogue.json"
OFFERED = 4  # functions per problem: the right one and 3 distractors
SCHEMA_KEYS = ("name", "description", "parameters")  # what a BFCL function record holds (the rest is the generator's)
TRIES_PER_PROBLEM = 1000  # draws in a row without a new request before a held-out split stops looking (>= 200 problems a seed)
MOST = 10_000  # problems a split generates at most (training's pool; `envs check` asks generated data for "all")


@cache
def catalogue() -> dict[str, list[dict]]:
    """{"train": [...], "unseen": [...]}: each entry a BFCL function plus its `domain`, `request` and `values`."""
    return json.loads(CATALOGUE.read_text(encoding="utf-8"))


def schema(entry: dict) -> dict:
    """The entry as a BFCL function record (what the agents see and the rules check)."""
    return {k: entry[k] for k in SCHEMA_KEYS}


def draw(entries: list[dict], rng: random.Random, pid: str) -> Problem:
    """One problem: a right function with values from its pools, 3 distractors, all 4 in a seeded order."""
    right = rng.choice(entries)
    values = {arg: rng.choice(pool) for arg, pool in right["values"].items()}
    question = right["request"].format(**values)
    offered = [right, *rng.sample([e for e in entries if e is not right], OFFERED - 1)]
    rng.shuffle(offered)
    gold = [{right["name"]: {arg: [value] for arg, value in values.items()}}]
    return Problem(pid, question, gold, {"functions": [schema(e) for e in offered]})


def generate(split: str, seed: int, n: int) -> list[Problem]:
    """`n` seeded problems of `split` ("train", "test" or "unseen"); a held-out split's requests are distinct."""
    rng, n = random.Random(f"function_select-{split}-{seed}"), min(n, MOST)
    entries = catalogue()["unseen" if split == "unseen" else "train"]
    if split == "train":
        return [_draw_side(entries, rng, f"train-{i}", held_out=False) for i in range(n)]
    problems: list[Problem] = []
    seen: set[str] = set()
    misses = 0
    while len(problems) < n and misses < TRIES_PER_PROBLEM:
        p = draw(entries, rng, f"{split}-{len(problems)}")
        new = p.question not in seen and (split == "unseen" or in_test_fifth(p.question))
        misses = 0 if new else misses + 1
        if new:
            seen.add(p.question)
            problems.append(p)
    return problems


def _draw_side(entries: list[dict], rng: random.Random, pid: str, held_out: bool) -> Problem:
    """Redraw until the request is on the asked side of `in_test_fifth`, so train and test never share one."""
    while True:
        p = draw(entries, rng, pid)
        if in_test_fifth(p.question) == held_out:
            return p


def as_bfcl(problems: list[Problem]) -> tuple[list[dict], list[dict]]:
    """The problems as a BFCL question file's and answer file's records (what `load_bfcl` reads back)."""
    questions = [
        {"id": p.id, "question": [[{"role": "user", "content": p.question}]], "function": p.meta["functions"]} for p in problems
    ]
    answers = [{"id": p.id, "ground_truth": p.answer} for p in problems]
    return questions, answers
