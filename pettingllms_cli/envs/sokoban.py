"""`sokoban_v0`: push the boxes onto the targets in a small walled room.

Symbols: `#` wall, `_` floor, `P` player, `B` box, `T` target, `X` box on a target, `Y` player
on a target. A 6x6 room (4x4 inside, up to two inner walls) with one or two boxes, generated
from the seed and kept only when breadth-first search over (player, boxes) finds a solution
of 2 to 16 moves. The plan is a list of moves U/D/L/R; walking into a wall or pushing a box
into a wall or another box is illegal. Solved when every box is on a target after the plan.
Progress (the plan agent's local reward) is the share of boxes on targets after the legal
prefix. Roles, rewards, data and options: see `envs/planning.py`.
"""

from __future__ import annotations

import random
from collections import deque

from pettingllms_cli.envs.planning import MOVES, PlanningEnv, Verdict, parse_moves

SIZE = 6
MAX_STATES = 50_000
State = tuple[tuple[int, int], frozenset]


def parse_room(grid: list[str]) -> tuple[set, set, set, tuple[int, int]]:
    """(walls, targets, boxes, player) of a room.

    >>> walls, targets, boxes, player = parse_room(["####", "#PBT", "####"])
    >>> sorted(boxes), sorted(targets), player
    ([(1, 2)], [(1, 3)], (1, 1))
    """
    walls, targets, boxes, players = set(), set(), set(), []
    for r, row in enumerate(grid):
        for c, ch in enumerate(row):
            cell = (r, c)
            if ch == "#":
                walls.add(cell)
            if ch in "TXY":
                targets.add(cell)
            if ch in "BX":
                boxes.add(cell)
            if ch in "PY":
                players.append(cell)
    if len(players) != 1 or not boxes or len(boxes) != len(targets):
        raise ValueError("a room needs one player and as many boxes as targets")
    return walls, targets, boxes, players[0]


def push(walls: set, state: State, move: str) -> State | None:
    """The state after one move, or None if it is illegal."""
    (r, c), boxes = state
    dr, dc = MOVES[move]
    nxt = (r + dr, c + dc)
    if nxt in walls:
        return None
    if nxt in boxes:
        beyond = (nxt[0] + dr, nxt[1] + dc)
        if beyond in walls or beyond in boxes:
            return None
        boxes = (boxes - {nxt}) | {beyond}
    return nxt, frozenset(boxes)


def shortest_plan(grid: list[str]) -> str | None:
    walls, targets, boxes, player = parse_room(grid)
    start: State = (player, frozenset(boxes))
    seen = {start: ""}
    queue = deque([start])
    while queue and len(seen) < MAX_STATES:
        state = queue.popleft()
        if state[1] == targets:
            return " ".join(seen[state])
        for move in MOVES:
            nxt = push(walls, state, move)
            if nxt is not None and nxt not in seen:
                seen[nxt] = seen[state] + move
                queue.append(nxt)
    return None


class SokobanEnv(PlanningEnv):
    name = "sokoban_v0"
    PLAN_SYSTEM = "Sokoban: push every box B onto a target T. P is you, # is a wall. Answer with moves U D L R."

    @classmethod
    def generate(cls, rng: random.Random) -> tuple[list[str], str] | None:
        room = [["#"] * SIZE] + [["#"] + ["_"] * (SIZE - 2) + ["#"] for _ in range(SIZE - 2)] + [["#"] * SIZE]
        inside = [(r, c) for r in range(1, SIZE - 1) for c in range(1, SIZE - 1)]
        n_boxes, n_walls = rng.choice([1, 1, 2]), rng.randint(0, 2)
        cells = rng.sample(inside, 1 + 2 * n_boxes + n_walls)
        player, targets, boxes, walls = (
            cells[0],
            cells[1 : 1 + n_boxes],
            cells[1 + n_boxes : 1 + 2 * n_boxes],
            cells[1 + 2 * n_boxes :],
        )
        for (r, c), ch in [(player, "P")] + [(t, "T") for t in targets] + [(b, "B") for b in boxes] + [(w, "#") for w in walls]:
            room[r][c] = ch
        grid = ["".join(row) for row in room]
        plan = shortest_plan(grid)
        return (grid, plan) if plan is not None and 2 <= len(plan.split()) <= 16 else None

    @classmethod
    def solve(cls, grid: list[str]) -> str | None:
        return shortest_plan(grid)

    @classmethod
    def simulate(cls, grid: list[str], plan: str) -> Verdict:
        walls, targets, boxes, player = parse_room(grid)
        moves = parse_moves(plan)
        state: State = (player, frozenset(boxes))
        legal = True
        for move in moves:
            nxt = push(walls, state, move)
            if nxt is None:
                legal = False
                break
            state = nxt
        on_target = len(state[1] & targets) / len(targets)
        return Verdict(bool(moves), legal, legal and state[1] == targets, on_target)

    @classmethod
    def illegal_plan(cls, grid: list[str]) -> str:
        """Walking up more rows than the room has must hit a wall or jam a box."""
        return " ".join("U" * (len(grid) + 1))
