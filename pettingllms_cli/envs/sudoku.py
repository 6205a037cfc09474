"""`sudoku4x4_v0`: fill a 4x4 Sudoku (each row, column and 2x2 box holds 1-4 once).

Blanks are `.`; puzzles are generated from the seed by shuffling a solved grid and blanking
6-10 cells while the solution stays unique (a backtracking solver counts solutions). The plan
is the 16 digits row by row (`Solution: 1234 3412 ...`). Changing a given digit is illegal.
Solved when the digits form a valid grid that keeps every given. Progress (the plan agent's
local reward) is the share of blanks filled with the right digit. Roles, rewards, data and
options: see `envs/planning.py`.
"""

from __future__ import annotations

import random
import re

from pettingllms_cli.envs.planning import PlanningEnv, Verdict

UNITS = (
    [[(r, c) for c in range(4)] for r in range(4)]
    + [[(r, c) for r in range(4)] for c in range(4)]
    + [[(br + r, bc + c) for r in range(2) for c in range(2)] for br in (0, 2) for bc in (0, 2)]
)


def cells(grid: list[str]) -> list[int]:
    """The 16 cells row by row, 0 for a blank.

    >>> cells(["1.34", "....", "....", "...."])[:4]
    [1, 0, 3, 4]
    """
    if len(grid) != 4 or any(len(row) != 4 for row in grid):
        raise ValueError("a 4x4 Sudoku has 4 rows of 4 cells")
    return [int(ch) if ch in "1234" else 0 for row in grid for ch in row]


def valid(values: list[int]) -> bool:
    return all(sorted(values[r * 4 + c] for r, c in unit) == [1, 2, 3, 4] for unit in UNITS)


def solutions(values: list[int], limit: int = 2) -> list[list[int]]:
    """Up to `limit` completions, by backtracking over the first blank."""
    if 0 not in values:
        return [list(values)] if valid(values) else []
    i = values.index(0)
    found: list[list[int]] = []
    for digit in range(1, 5):
        if all(values[r * 4 + c] != digit for unit in UNITS if (i // 4, i % 4) in unit for r, c in unit):
            values[i] = digit
            found += solutions(values, limit - len(found))
            values[i] = 0
            if len(found) >= limit:
                break
    return found


def as_plan(values: list[int]) -> str:
    """Digits row by row, rows separated by spaces.

    >>> as_plan([1, 2, 3, 4] * 4)
    '1234 1234 1234 1234'
    """
    return " ".join("".join(map(str, values[r * 4 : r * 4 + 4])) for r in range(4))


class SudokuEnv(PlanningEnv):
    name = "sudoku4x4_v0"
    PLAN_PREFIX = "Solution: "
    PLAN_SYSTEM = "Fill the 4x4 Sudoku: each row, column and 2x2 box has 1-4 once. Give the 16 digits row by row."

    @classmethod
    def generate(cls, rng: random.Random) -> tuple[list[str], str] | None:
        digits = rng.sample([1, 2, 3, 4], 4)
        rows = [[0, 1, 2, 3], [2, 3, 0, 1], [1, 0, 3, 2], [3, 2, 1, 0]]
        row_order = rng.sample([0, 1], 2) + rng.sample([2, 3], 2)
        col_order = rng.sample([0, 1], 2) + rng.sample([2, 3], 2)
        values = [digits[rows[r][c]] for r in row_order for c in col_order]
        for i in rng.sample(range(16), 16)[: rng.randint(6, 10)]:
            kept, values[i] = values[i], 0
            if len(solutions(list(values))) != 1:
                values[i] = kept  # blanking it would allow a second solution
        grid = ["".join(str(v) if v else "." for v in values[r * 4 : r * 4 + 4]) for r in range(4)]
        return grid, as_plan(solutions(list(values), 1)[0])

    @classmethod
    def render(cls, grid: list[str]) -> str:
        return "\n".join(" ".join(row) for row in grid)

    @classmethod
    def solve(cls, grid: list[str]) -> str | None:
        found = solutions(cells(grid), 1)
        return as_plan(found[0]) if found else None

    @classmethod
    def simulate(cls, grid: list[str], plan: str) -> Verdict:
        given = cells(grid)
        digits = [int(d) for d in re.findall(r"[1-4]", plan)[:16]]
        legal = all(g in (0, d) for g, d in zip(given, digits, strict=False))  # a short plan is checked as far as it goes
        solution = [int(ch) for ch in (cls.solve(grid) or "").replace(" ", "")]
        blanks = [i for i, g in enumerate(given) if g == 0]
        right = sum(i < len(digits) and i < len(solution) and digits[i] == solution[i] for i in blanks)
        solved = legal and len(digits) == 16 and valid(digits)
        return Verdict(bool(digits), legal, solved, right / max(1, len(blanks)) if legal else 0.0)

    @classmethod
    def illegal_plan(cls, grid: list[str]) -> str:
        """The solution with the first given digit changed."""
        values = [int(ch) for ch in (cls.solve(grid) or "1" * 16).replace(" ", "")]
        i = next(i for i, g in enumerate(cells(grid)) if g)
        values[i] = values[i] % 4 + 1
        return as_plan(values)
