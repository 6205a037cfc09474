"""`external`: the team is the user's own program, which calls the agents through an OpenAI-compatible endpoint
(docs/external.md).

The env holds what the spec needs to check before anything loads: the program's import path (a path that does not
import is one line at `validate`), where the problems come from, and how a finished episode is scored when the
program hands back its final answer instead of a reward. The rollout (rollout/external.py) runs the program; this env
is never stepped turn by turn, so its roles are whatever the agents call theirs (`AnyRoles`).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from pettingllms_cli.envs.base import EnvOptions, Outcome, Problem, TurnEnv, read_jsonl, split_records
from pettingllms_cli.envs.imports import NotAnImportPath, import_object
from pettingllms_cli.envs.messages import Message
from pettingllms_cli.errors import UserError


class AnyRoles(tuple):
    """A layout that holds every role name: the program, not the env, decides who acts and when.

    Empty when iterated (no role is required), yet `"planner" in AnyRoles()` is true, so each agent may name its
    role freely (`roles: [planner]`)."""

    def __contains__(self, role: object) -> bool:
        return isinstance(role, str)


def load_program(path: str) -> Callable[..., Any]:
    """The function `module:func` names; a path that does not import, or names no function, is a ValueError in one
    line (the spec check turns it into `env.options.program: ...`)."""
    try:
        obj = import_object(path)
    except NotAnImportPath:
        raise ValueError(f"{path!r} is not an import path; write it as `package.module:function`") from None
    except ValueError as e:
        raise ValueError(f"{path!r}: {e}") from None
    if not callable(obj):
        raise ValueError(f"{path!r} is not a function")
    try:
        inspect.signature(obj).bind({}, "http://x")
    except TypeError:
        raise ValueError(f"{path!r} must take (problem, base_url): the problem as a dict and the agents' base URL") from None
    except ValueError:  # a builtin without a signature: nothing to check
        pass
    return obj


class ExternalOptions(EnvOptions):
    program: str = Field(
        description="`package.module:function` called as function(problem, base_url) for each episode; "
        "it returns a reward, or {'answer': ...} for the built-in check (docs/external.md)."
    )
    data: str | None = Field(
        None,
        description="Where the problems come from: an env's name (its problems, e.g. `math_tool_v0` with env.data "
        "`generated`) or a JSONL file of {question, answer}; default: env.data as a JSONL file.",
    )
    env_options: dict[str, Any] = Field(default_factory=dict, description="Options for the env named by `data`.")
    concurrency: int = Field(8, ge=1, le=256, description="Episodes of the program running at once.")
    timeout: float = Field(120.0, gt=0, le=86_400, description="Seconds one episode may run before it fails.")
    failure_reward: float = Field(
        -1.0, ge=-100, le=100, description="Team reward of an episode whose program raised, hung or never called."
    )

    @field_validator("program")
    @classmethod
    def _imports(cls, path: str) -> str:
        load_program(path)  # before any weights load: a path that does not import fails `validate` and `train`
        return path


class ExternalEnv(TurnEnv):
    """The problems an external program plays, and the check of an answer it hands back."""

    name = "external"
    Options = ExternalOptions
    layouts = {"multi": AnyRoles(), "single": AnyRoles()}

    def observe(self, role: str) -> list[Message]:
        return [{"role": "user", "content": self.problem.question}]

    def _act(self, role: str, text: str) -> Outcome:  # never called: the program plays (rollout/external.py)
        return Outcome(0.0, 0.0)

    @classmethod
    def load_problems(cls, data: str, split: str, seed: int, n: int, options: dict | None = None) -> list[Problem]:
        if not (options or {}).get("program"):  # `envs check external`: there is no program to play it
            raise UserError(
                "external: its episodes are played by your program (env.options.program), which `envs check` cannot run; "
                "check a spec with `pettingllms validate SPEC` (docs/external.md)"
            )
        opts = ExternalOptions.model_validate(options)
        source = opts.data or data
        from pettingllms_cli.envs import ENVS  # the env registry imports this module's siblings

        if source in ENVS and source != cls.name:  # an env's own problems, from env.data
            return ENVS[source].load_problems(data, split, seed, n, opts.env_options)
        path = Path(source)
        records = read_jsonl(path)
        problems = []
        for i, rec in enumerate(records, 1):
            if not isinstance(rec, dict) or not isinstance(rec.get("question"), str) or "answer" not in rec:
                raise UserError(f"{path}:{i}: a record needs a string `question` and an `answer`")
            meta = {k: v for k, v in rec.items() if k not in ("id", "question", "answer")}
            problems.append(Problem(str(rec.get("id", f"{path.stem}-{i}")), rec["question"], rec["answer"], meta))
        return split_records(problems, split, max(1, len(problems) // 5), path)[:n]


def answer_is_right(answer: object, gold: object) -> bool:
    """The built-in check of a program's final answer: as numbers when both read as numbers (relative 1e-6), else as
    trimmed, case-folded text.

    >>> answer_is_right("19", 19.0), answer_is_right(" 19.0000001 ", 19), answer_is_right("Paris", "paris")
    (True, True, True)
    >>> answer_is_right("20", 19), answer_is_right(None, 19)
    (False, False)
    """
    a, g = _number(answer), _number(gold)
    if a is not None and g is not None:
        return math.isclose(a, g, rel_tol=1e-6, abs_tol=1e-9)
    return answer is not None and str(answer).strip().casefold() == str(gold).strip().casefold()


def _number(value: object) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(str(value).strip().replace(",", ""))
    except ValueError:
        return None
    return number if math.isfinite(number) else None
