"""`math_tool_v0`'s generated problems: seeded word-problem templates, one per operation, and a held-out fifth of
all expressions that training never draws (envs/math_tool.py reads GSM8K files itself)."""

from __future__ import annotations

import random

from pettingllms_cli.envs.base import Problem, in_test_fifth
from pettingllms_cli.tools.calculator import calculate

# (template, expression) pairs; {a} and {b} are filled with numbers, {name} and {item} with words.
TEMPLATES = {
    "+": ("{name} has {a} {item} and gets {b} more. How many {item} does {name} have?", "{a}+{b}"),
    "-": ("{name} had {a} {item} and gave away {b}. How many {item} are left?", "{a}-{b}"),
    "*": ("There are {a} bags with {b} {item} in each. How many {item} are there?", "{a}*{b}"),
    "/": ("{name} shares {p} {item} equally among {b} friends. How many {item} does each friend get?", "{p}/{b}"),
}
OPS = "+-*/"
NAMES = ["Tom", "Mia", "Sam", "Lea", "Ben", "Ava", "Max", "Zoe"]
ITEMS = ["apples", "cards", "stamps", "marbles", "books", "coins"]


def is_held_out(expression: str) -> bool:
    """Whether a generated expression belongs to the test split: a fixed fifth of them, the same for every seed.

    >>> [is_held_out(e) for e in ("12+7", "30-4", "4*6")]
    [False, True, True]
    """
    return in_test_fifth(expression)


def generate_problems(seed: int, n: int, prefix: str, ops: str = OPS, held_out: bool | None = None) -> list[Problem]:
    """`n` seeded problems; `held_out` True/False draws only test/training expressions (None: any)."""
    rng = random.Random(seed)
    problems = []
    for i in range(n):
        while True:  # redraw until the expression is on the asked side, so train and test never share one
            template, expr = TEMPLATES[rng.choice(ops)]
            a, b = rng.randint(11, 60), rng.randint(2, 9)
            values = {"a": a, "b": b, "p": a * b, "name": rng.choice(NAMES), "item": rng.choice(ITEMS)}
            expression = expr.format(**values)
            if held_out is None or is_held_out(expression) == held_out:
                break
        answer = calculate(expression)
        problems.append(Problem(f"{prefix}{i}", template.format(**values), answer, {"expression": expression}))
    return problems
