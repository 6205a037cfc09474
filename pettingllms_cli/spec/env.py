"""The `env` and `tools` sections: which environment, its data and options, and how model-written code runs."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from pettingllms_cli.spec.limits import MAX_PROBLEMS
from pettingllms_cli.spec.strict import Strict


class EnvSpec(Strict):
    name: str = Field(
        description="Registered environment name with version, e.g. `math_tool_v0` (see `pettingllms envs list`), or your "
        "own env's import path `mypkg.envs:MyEnv` (docs/envs.md, 'Your own env')."
    )
    layout: str = Field(
        "multi", description="Which role layout of the env to use: `multi` (named roles) or `single` (one role does everything)."
    )
    data: str = Field(
        "generated",
        description="`generated` (problems made from the seed) or a path to a data file the env reads (e.g. GSM8K jsonl); "
        "`validate` opens it. Training and held-out problems never overlap; a file needs at least 2 records.",
    )
    max_turns: int = Field(2, ge=1, le=16, description="Rounds per episode; in each round every role acts once, in turn order.")
    eval_problems: int = Field(
        16,
        ge=1,
        le=MAX_PROBLEMS,
        description=f"Held-out problems scored greedily before and after training (report.md), 1 to {MAX_PROBLEMS:,}. "
        "A data file holds out its "
        "last fifth (at least 1; the bundled samples: code_v0 5, function_call_v0 4, sql_v0 7); asking for more is an error.",
    )
    options: dict[str, Any] = Field(default_factory=dict, description="Env-specific options (see the env's docstring).")


class ToolsSpec(Strict):
    sandbox: Literal["strict", "best_effort"] = Field(
        "strict",
        description="How model-written code runs (docs/sandbox.md). `strict`: confined by the kernel (namespaces, a "
        "read-only root, Landlock); a kernel lacking either is an error before any model loads. `best_effort`: on such "
        "a kernel, say what is missing in one line and run with what it has (namespaces alone, or rlimits and an audit "
        "hook).",
    )
