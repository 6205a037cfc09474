"""`plan_path_v0`: find a shortest path on a small grid with obstacles.

A 5x5 grid: `S` start, `G` goal, `#` obstacle, `.` free. The plan is a list of moves
U/D/L/R; it solves the puzzle when every move stays on free cells, it ends on `G`, and it
is as short as the shortest path (breadth-first search guarantees one exists, length >= 3).
Progress (the plan agent's local reward) is the share of the start-goal distance covered by
the legal prefix. Roles, rewards, data and options: see `envs/planning.py`.
"""

from __future__ import annotations

import random
from collections import deque

from pettingllms_cli.envs.planning import MOVES, PlanningEnv, Verdict, parse_moves

SIZE = 5


def find(grid: list[str], char: str) -> tuple[int, int]:
    """Row and column of the first `char`.

    >>> find(["..", ".G"], "G")
    (1, 1)
    """
    for r, row in enumerate(grid):
        if char in row:
            return r, row.index(char)
    raise ValueError(f"no {char!r} in the grid")


def free(grid: list[str], r: int, c: int) -> bool:
    return 0 <= r < len(grid) and 0 <= c < len(grid[r]) and grid[r][c] != "#"


def distances(grid: list[str], source: tuple[int, int]) -> dict[tuple[int, int], tuple[int, str]]:
    """BFS from `source`: cell -> (distance, moves to reach it)."""
    seen = {source: (0, "")}
    queue = deque([source])
    while queue:
        r, c = queue.popleft()
        d, path = seen[(r, c)]
        for move, (dr, dc) in MOVES.items():
            nxt = (r + dr, c + dc)
            if nxt not in seen and free(grid, *nxt):
                seen[nxt] = (d + 1, path + move)
                queue.append(nxt)
    return seen


class PlanPathEnv(PlanningEnv):
    name = "plan_path_v0"
    PLAN_SYSTEM = "Find the shortest path from S to G. # is a wall. Answer with moves U D L R."

    @classmethod
    def generate(cls, rng: random.Random) -> tuple[list[str], str] | None:
        cells = [(r, c) for r in range(SIZE) for c in range(SIZE)]
        picks = rng.sample(cells, 2 + rng.randint(4, 8))
        grid = [["."] * SIZE for _ in range(SIZE)]
        (sr, sc), (gr, gc) = picks[0], picks[1]
        grid[sr][sc], grid[gr][gc] = "S", "G"
        for r, c in picks[2:]:
            grid[r][c] = "#"
        rows = ["".join(row) for row in grid]
        plan = cls.solve(rows)
        return (rows, plan) if plan is not None and len(plan.split()) >= 3 else None

    @classmethod
    def solve(cls, grid: list[str]) -> str | None:
        reach = distances(grid, find(grid, "S"))
        goal = find(grid, "G")
        return " ".join(reach[goal][1]) if goal in reach else None

    @classmethod
    def simulate(cls, grid: list[str], plan: str) -> Verdict:
        moves = parse_moves(plan)
        start, goal = find(grid, "S"), find(grid, "G")
        to_goal = distances(grid, goal)
        pos, legal = start, True
        for move in moves:
            nxt = (pos[0] + MOVES[move][0], pos[1] + MOVES[move][1])
            if not free(grid, *nxt):
                legal = False
                break
            pos = nxt
        total = to_goal[start][0]
        progress = max(0.0, (total - to_goal[pos][0]) / total) if total else 1.0
        solved = legal and pos == goal and len(moves) == total
        return Verdict(bool(moves), legal, solved, progress)

    @classmethod
    def illegal_plan(cls, grid: list[str]) -> str:
        """Walking up more rows than the grid has must leave it."""
        return " ".join("U" * (len(grid) + 1))
