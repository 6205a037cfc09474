"""What the planning envs (`sudoku4x4_v0`, `plan_path_v0`, `sokoban_v0`) share.

Layouts:
- `multi`: `tool_agent` may write Python (run in the sandbox, standard library only); its
  printed output is shown to `plan_agent`, which states the final plan after a prefix.
- `single`: `planner` states the plan; if its reply holds a ```python block instead, the code
  runs in the sandbox and the plan is read from what it prints.

Rewards per action: team = the team's current plan solves the puzzle (solved on the plan
agent's or the single planner's action). Local (envs/rewards.py): tool agent `TOOL_RAN` (+0.1) for
code that ran, `TOOL_FAILED` (-0.1) for code that failed or timed out; plan agent and planner =
progress of the plan's legal prefix (share of cells right, distance covered, boxes on targets),
`NO_PLAN` (-0.1) if no plan could be read.
An illegal move ends the plan where it happened.

A subclass gives `generate(rng)`, `solve(grid)`, `simulate(grid, plan)`, `illegal_plan(grid)`
and its prompt texts. Puzzles are grids of strings (rows); data is `generated` from the seed
(at most 500 puzzles per split; training cycles through them; a fixed fifth of all puzzles is
kept for test, so no test puzzle is trained on)
or a JSON-lines file with a `grid` per line (each is solved on load; an unsolvable one is an
error naming the record). Option `timeout` (default 2 s) limits each sandbox run.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field

from pettingllms_cli.envs.base import EnvOptions, Message, Outcome, Problem, TurnEnv, in_test_fifth, read_jsonl, split_records
from pettingllms_cli.envs.rewards import NO_PLAN, TOOL_FAILED, TOOL_RAN
from pettingllms_cli.errors import UserError
from pettingllms_cli.tools.calls import strip_tool_results
from pettingllms_cli.tools.sandbox import run_python

CODE_PREFIX = "```python\n"
GENERATED_POOL = 500  # distinct puzzles per seed and split; training cycles through them
TOOL_SYSTEM = "Write a short Python program that prints the answer."
MOVES = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}
_WORDS = {"up": "U", "down": "D", "left": "L", "right": "R"}
_MOVE_RE = re.compile(r"\b(?:up|down|left|right)\b|[UDLR]")
_CODE_RE = re.compile(r"```python\n(.*?)(?:```|$)", re.DOTALL)


@dataclass
class Verdict:
    parsed: bool  # a plan could be read at all
    legal: bool  # every step was allowed
    solved: bool
    progress: float  # in [0, 1], of the legal prefix


def parse_moves(text: str) -> list[str]:
    """Moves U/D/L/R (or the words) from the first non-empty line.

    >>> parse_moves("R R down L\\nignored U")
    ['R', 'R', 'D', 'L']
    """
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    return [_WORDS.get(m, m) for m in _MOVE_RE.findall(line)]


def after_prefix(text: str, prefix: str) -> str:
    """The text after the last occurrence of `prefix` (or all of it).

    >>> after_prefix("noise\\nMoves: R D", "Moves: ")
    'R D'
    """
    i = text.rfind(prefix.strip())
    return text[i + len(prefix.strip()) :].strip() if i >= 0 else text.strip()


class PlanningOptions(EnvOptions):
    timeout: float = Field(2.0, gt=0, description="Seconds the tool agent's sandboxed program may run.")


class PlanningEnv(TurnEnv):
    Options = PlanningOptions
    layouts = {"multi": ("tool_agent", "plan_agent"), "single": ("planner",)}
    runs_model_code = True  # the tool agent's Python
    PLAN_PREFIX: str = "Moves: "
    PLAN_SYSTEM: str = ""
    id_prefix: str = "puzzle"

    # --- what each puzzle provides ------------------------------------------------------------
    @classmethod
    def generate(cls, rng: random.Random) -> tuple[list[str], str] | None:
        """A puzzle and its shortest plan, or None to draw again."""
        raise NotImplementedError

    @classmethod
    def solve(cls, grid: list[str]) -> str | None:
        """A shortest plan (as the plan agent would write it after the prefix), or None."""
        raise NotImplementedError

    @classmethod
    def simulate(cls, grid: list[str], plan: str) -> Verdict:
        raise NotImplementedError

    @classmethod
    def illegal_plan(cls, grid: list[str]) -> str:
        raise NotImplementedError

    @classmethod
    def render(cls, grid: list[str]) -> str:
        return "\n".join(grid)

    # --- the env -------------------------------------------------------------------------------
    def _reset_task(self) -> None:
        self.tool_output = "(none)"
        self.plan: str | None = None
        self.feedback: str | None = None

    @property
    def grid(self) -> list[str]:
        return self.problem.meta["grid"]

    def observe(self, role: str) -> list[Message]:
        puzzle = self.problem.question + (f"\n{self.feedback}" if self.feedback else "")
        if role == "tool_agent":
            return [
                {"role": "system", "content": f"{self.PLAN_SYSTEM} {TOOL_SYSTEM}"},
                {"role": "user", "content": puzzle},
                {"role": "assistant", "content": CODE_PREFIX},
            ]
        seen = f"\nTool output: {self.tool_output}" if role == "plan_agent" else ""
        return [
            {"role": "system", "content": self.PLAN_SYSTEM},
            {"role": "user", "content": puzzle + seen},
            {"role": "assistant", "content": self.PLAN_PREFIX},
        ]

    def _act(self, role: str, text: str) -> Outcome:
        text = strip_tool_results(text)
        if role == "tool_agent":
            return self._run_tool(text)
        code = _CODE_RE.search(text)
        if code:  # the single planner may compute its plan with code
            result = run_python(code.group(1), timeout=self.timeout)
            text = result.stdout if result.ok else ""
        return self._judge(after_prefix(text, self.PLAN_PREFIX))

    @property
    def timeout(self) -> float:
        return self.opts.timeout

    def _run_tool(self, text: str) -> Outcome:
        code = _CODE_RE.search(text)
        result = run_python(code.group(1) if code else text, timeout=self.timeout)
        self.tool_output = result.feedback(200)
        verdict = self.simulate(self.grid, after_prefix(result.stdout, self.PLAN_PREFIX)) if result.ok else None
        team = float(bool(verdict and verdict.solved))
        return Outcome(TOOL_RAN if result.ok else TOOL_FAILED, team, info={"tool_ok": result.ok, "tool_error": result.error})

    def _judge(self, plan: str) -> Outcome:
        verdict = self.simulate(self.grid, plan)
        self.plan = plan[:200]
        if not verdict.solved:
            why = "an illegal move" if not verdict.legal else "no solution"
            self.feedback = f"Your last answer ({self.plan[:60] or 'empty'}) was {why}. Try again."
        local = verdict.progress if verdict.parsed else NO_PLAN
        return Outcome(local, float(verdict.solved), solved=verdict.solved, info={"legal": verdict.legal, "plan": self.plan})

    # --- reference and corrupted actions ------------------------------------------------------
    def reference_action(self, role: str) -> str:
        plan = self.problem.answer
        if role == "tool_agent":
            return f"{CODE_PREFIX}print({(self.PLAN_PREFIX + plan)!r})\n```"
        return self.PLAN_PREFIX + plan

    def corrupted_actions(self, role: str) -> list[str]:
        """An illegal plan; for the tool agent, failing code as well."""
        if role == "tool_agent":
            return [f"{CODE_PREFIX}raise RuntimeError('no')\n```", f"{CODE_PREFIX}print({self.illegal_plan(self.grid)!r})\n```"]
        return [self.PLAN_PREFIX + self.illegal_plan(self.grid)]

    # --- data ------------------------------------------------------------------------------------
    @classmethod
    def make_problem(cls, pid: str, grid: list[str], plan: str | None = None) -> Problem | None:
        plan = plan if plan is not None else cls.solve(grid)
        return None if plan is None else Problem(pid, cls.render(grid), plan, {"grid": list(grid)})

    @classmethod
    def load_problems(cls, data: str, split: str, seed: int, n: int, options: dict | None = None) -> list[Problem]:
        if data != "generated":
            return cls._load_file(Path(data), split, n)
        # Train and test come from different seed streams and sides of `in_test_fifth`, like math_tool_v0.
        rng = random.Random(f"{cls.name}:{seed * 2 + (1 if split == 'test' else 0)}")
        problems: list[Problem] = []
        while len(problems) < min(n, GENERATED_POOL):
            drawn = cls.generate(rng)
            if drawn is not None and in_test_fifth("\n".join(drawn[0])) == (split == "test"):  # no puzzle in both
                problems.append(cls.make_problem(f"{split}-{len(problems)}", *drawn))
        return problems

    @classmethod
    def _load_file(cls, path: Path, split: str, n: int) -> list[Problem]:
        problems = []
        for i, rec in enumerate(read_jsonl(path), 1):
            grid = rec.get("grid")
            if not isinstance(grid, list) or not grid or not all(isinstance(r, str) for r in grid):
                raise UserError(f"{path}: record {i} needs `grid`, a list of row strings")
            try:
                problem = cls.make_problem(f"{path.stem}-{i}", grid)
            except (ValueError, IndexError, KeyError) as e:
                raise UserError(f"{path}: record {i}: malformed grid ({e})") from None
            if problem is None:
                raise UserError(f"{path}: record {i}: the puzzle has no solution")
            problems.append(problem)
        return split_records(problems, split, max(1, len(problems) // 5), path)[:n]
