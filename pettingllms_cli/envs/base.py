"""The environment contract (docs/design.md, "The env contract"): turn-based, multi-role, text actions.

`TurnEnv` holds what every env shares: the turn order, rounds, termination, the transcript,
`copy()` for tree sampling and `state()` for logs. A concrete env implements `observe`,
`_act` (score one action) and `load_problems`. The optional intent protocol is the rollout's
(rollout/coordination.py holds the turn's intents and the checks); the env's only part is its
judgement of whether an action did what its role's intent said (`intent_agrees`, envs/intents.py).
"""

from __future__ import annotations

import copy
import json
import random
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from pettingllms_cli.envs.intents import agrees
from pettingllms_cli.envs.messages import Message
from pettingllms_cli.envs.messages import prefill as messages_prefill
from pettingllms_cli.errors import UserError


@dataclass
class Problem:
    id: str
    question: str
    answer: Any
    meta: dict = field(default_factory=dict)


DUE = "verdict_due"  # StepResult.info key of a judged action: the verdict the facts called for (True: let it run / accept)


@dataclass
class StepResult:
    local_reward: float
    team_reward: float
    terminated: bool
    truncated: bool
    info: dict = field(default_factory=dict)


@dataclass
class Outcome:
    """What one action did, as `_act` reports it."""

    local_reward: float
    team_reward: float
    solved: bool = False
    info: dict = field(default_factory=dict)
    attempt: bool | None = None  # is this action an attempt at the task? None: the env's default (`TurnEnv.is_attempt`)


class EnvOptions(BaseModel):
    """An env's `env.options`, typed: each env subclasses it, and a misspelled option fails `validate`, naming it."""

    model_config = ConfigDict(extra="forbid")


class TurnEnv:
    name: ClassVar[str]
    Options: ClassVar[type[EnvOptions]] = EnvOptions  # what `env.options` may hold (none by default)
    version: ClassVar[int] = 0
    layouts: ClassVar[dict[str, tuple[str, ...]]]
    # Roles whose action cannot change the team reward until a later role of the turn acts on it (a
    # planner, a tester): their team term needs the play-out to the turn's end (credit.py).
    deferred_roles: ClassVar[frozenset[str]] = frozenset()
    # Roles whose empty action is not a useless one, so `credit: difference` has no no-op to compare with.
    no_noop_roles: ClassVar[frozenset[str]] = frozenset()
    # Runs model-written code in tools/sandbox.py: the CLI checks the kernel's sandbox before any model loads.
    runs_model_code: ClassVar[bool] = False

    def __init__(self, problem: Problem, layout: str = "multi", max_turns: int = 2, options: dict | None = None):
        if layout not in self.layouts:
            raise ValueError(f"{self.name}: unknown layout {layout!r}")
        self.problem = problem
        self.layout = layout
        self.max_turns = max_turns
        self.options = dict(options or {})  # as given; the env reads them typed, through `opts`
        self._opts: EnvOptions | None = None
        # The env's own randomness, if it has any (none of the built-ins does): seeded from the problem until
        # `reset(seed=...)` reseeds it, so the same problem and seed give the same episode.
        self.rng = random.Random(f"{type(self).__name__}:{problem.id}")
        self.reset()

    # --- the contract -------------------------------------------------------------------
    @property
    def roles(self) -> tuple[str, ...]:
        """The layout's roles in turn order (who acts is the rollout's role -> agent assignment)."""
        return self.layouts[self.layout]

    @property
    def possible_agents(self) -> tuple[str, ...]:
        """PettingZoo's name for `roles` (in PettingZoo the acting entities are agents; here they are roles)."""
        return self.roles

    @property
    def opts(self) -> Any:
        """`options` as the env's `Options` model: each default is written there once, and the env reads nothing else."""
        if self._opts is None:
            self._opts = self.Options.model_validate(self.options)
        return self._opts

    def reset(self, seed: int | None = None, options: dict | None = None) -> dict[str, list[Message]]:
        """Start the episode over: the observations of every role. As in PettingZoo, `seed` reseeds the env's own
        randomness (`rng`), so the same seed gives the same observations; without one, `rng` goes on where it was."""
        if seed is not None:
            self.rng = random.Random(seed)
        if options:
            self.options.update(options)
            self._opts = None
        self.turn = 0
        self.next_role = 0
        self.success = False
        self.solved_at_turn: int | None = None
        self.attempts_made = 0  # attempt actions taken so far (`is_attempt`)
        self.solved_at_attempt: int | None = None  # the attempt that first solved the problem
        self.terminated = False
        self.truncated = False
        self.handed_in = False  # the team handed in its final answer, right or wrong: the episode ends (envs that commit set it)
        self.transcript: list[dict] = []
        self._reset_task()
        return {role: self.observe(role) for role in self.roles}

    def observe(self, role: str) -> list[Message]:
        raise NotImplementedError

    def step(self, role: str, text: str) -> StepResult:
        expected = self.current_role
        if role != expected:
            raise ValueError(f"{self.name}: it is {expected!r}'s turn, not {role!r}")
        text = text if isinstance(text, str) else ""
        out = self._act(role, text)
        self.transcript.append({"turn": self.turn, "role": role, "text": text, **out.info})
        if out.solved or (self.is_attempt(role) if out.attempt is None else out.attempt):
            self.attempts_made += 1  # the solving action is always an attempt: it gave the answer
        if out.solved and not self.success:
            self.success = True
            self.solved_at_turn = self.turn
            self.solved_at_attempt = self.attempts_made
        self.next_role += 1
        if self.next_role == len(self.roles):
            self.next_role = 0
            self.turn += 1
        self.terminated = self.success or self.handed_in
        self.truncated = not self.terminated and self.turn >= self.max_turns
        return StepResult(out.local_reward, out.team_reward, self.terminated, self.truncated, out.info)

    def prefill(self, role: str) -> str:
        """The text `observe(role)` puts at the start of the role's answer (its assistant prefill), or ''."""
        messages = self.observe(role)
        return messages_prefill(messages)

    def intent_agrees(self, role: str, intent: str, action: str) -> bool:
        """Does `action` (the generated text, without the env's prefill) do what `intent` said?

        Asked by the intent protocol (rollout/coordination.py). Textual by default (intents.agrees); envs may override.
        """
        return agrees(intent, action)

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated

    @property
    def current_role(self) -> str:
        return self.roles[self.next_role]

    def is_attempt(self, role: str) -> bool:
        """Whether `role`'s action (called before it steps) is an attempt when `_act` does not say.

        Default: the action that closes a round, i.e. the answer the team hands in each round (the
        single agent's every action; a team's last role). Counting every team action instead would
        make a team of R roles look R times slower by construction. Envs may override, or set
        `Outcome.attempt` per action (e.g. only tool calls that ran).
        """
        return self.next_role == len(self.roles) - 1

    @property
    def attempts(self) -> int | None:
        """Attempts (`is_attempt` actions) up to and including the one that first solved the problem; None if unsolved.

        Unsolved episodes have no attempts figure: reports give the share solved within the budget
        apart, so 1.0 can only mean "solved at the first attempt".
        """
        return self.solved_at_attempt

    def state(self) -> dict:
        return {
            "env": self.name,
            "problem": asdict(self.problem),
            "layout": self.layout,
            "turn": self.turn,
            "next_role": self.current_role,
            "success": self.success,
            "attempts": self.attempts,
            "transcript": self.transcript,
        }

    def copy(self) -> TurnEnv:
        return copy.deepcopy(self)

    # --- what each env provides -----------------------------------------------------------
    def _reset_task(self) -> None:
        """Clear per-episode task state (called by reset)."""

    def _act(self, role: str, text: str) -> Outcome:
        raise NotImplementedError

    @classmethod
    def load_problems(cls, data: str, split: str, seed: int, n: int, options: dict | None = None) -> list[Problem]:
        """Up to n problems of `split` ("train" | "test") from `data` ("generated" or a file); options = env.options."""
        raise NotImplementedError

    # --- what the checker (envs/checker.py, `envs check`) replays ------------------------------
    def reference_action(self, role: str) -> str:
        """A correct action of `role` in the current state: played by every role, it solves the problem."""
        raise NotImplementedError

    def corrupted_actions(self, role: str) -> list[str]:
        """Wrong actions of `role` (a wrong number, a wrong call) that the env must not reward; none by default."""
        return []

    @staticmethod
    def data_error(problem: Problem) -> str | None:
        """Why a data record is unusable, naming the file, record and field; None when it is fine (the default)."""
        return None


def read_jsonl(path: Path) -> list[dict]:
    """Records of a JSON-lines file; a bad line is a UserError naming file and line."""
    if not path.is_file():
        raise UserError(f"{path}: data file not found; pass an existing file or `data: generated`")
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise UserError(f"{path}: cannot read the data file ({e.strerror or e})") from None
    records = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError) as e:  # also an int past 4,300 digits, or nesting past the recursion limit
            why = "nested too deeply" if isinstance(e, RecursionError) else str(e).split(":")[0][:80]
            raise UserError(f"{path}: line {i} is not valid JSON ({why})") from None
        if not isinstance(rec, dict):
            raise UserError(f"{path}: line {i} is not a JSON object")
        records.append(rec)
    if not records:
        raise UserError(f"{path}: no records")
    return records


def in_test_fifth(key: str) -> bool:
    """Whether generated content `key` belongs to the test split: a fixed fifth of all keys, the same for every
    seed, so generated training and test problems never share one.

    >>> [in_test_fifth(k) for k in ("12+7", "30-4")]
    [False, True]
    """
    return zlib.crc32(key.encode()) % 5 == 0


def split_records(records: list, split: str, holdout: int, source: object = "the data") -> list:
    """The last `holdout` records are the held-out test split; the rest are for training.

    One record cannot be both: fewer than two is a UserError naming `source` (the file).
    """
    if len(records) < 2:
        raise UserError(
            f"{source}: {len(records)} record(s) cannot make both a training and a held-out split; "
            "give at least 2 (the last fifth, at least 1, is held out)"
        )
    holdout = max(1, min(holdout, len(records) // 2))
    return records[-holdout:] if split == "test" else records[:-holdout]
