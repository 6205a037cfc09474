"""Loading an env's problems for a command: every way data can be unusable is one UserError.

`train`, `validate`, `eval` and `compare` all load through `load_split`, so a missing file, a bad
record or a held-out split smaller than asked for reads the same everywhere and surfaces before
any run directory is made or any weight is loaded.
"""

from __future__ import annotations

import hashlib
import json

from pettingllms_cli.envs import ENVS, Problem, TurnEnv
from pettingllms_cli.errors import UserError

# What a loader may raise on a record it did not anticipate; turned into one line naming the data.
_READ_ERRORS = (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError)


HELD_OUT_SEED = 0  # the held-out split is one fixed set, drawn with this seed whatever a run's seed: seeds pair on problems


def load_split(env_name: str, data: str, split: str, seed: int, n: int, options: dict | None = None) -> list[Problem]:
    """Up to `n` problems of `split`; a held-out (`test`) split must hold all `n` of them."""
    if split not in ("train", "test"):
        raise UserError(f"--split {split!r}: use `test` (held-out) or `train`")
    problems = read_split(ENVS[env_name], data, split, seed, n, options)
    if split == "test" and len(problems) < n:
        raise UserError(
            f"{data}: {env_name} has {len(problems)} held-out problems, fewer than the {n} asked for "
            f"(env.eval_problems or --episodes); ask for at most {len(problems)} or use a larger data file"
        )
    return problems


def read_split(env_cls: type[TurnEnv], data: str, split: str, seed: int, n: int, options: dict | None = None) -> list[Problem]:
    """`env_cls.load_problems`, with anything a loader did not anticipate and an empty split as one UserError."""
    try:
        problems = env_cls.load_problems(data, split, seed, n, options)
    except UserError:
        raise
    except _READ_ERRORS as e:
        raise UserError(f"{data}: {env_cls.name} cannot read this data file ({type(e).__name__}: {e})") from None
    if not problems:
        raise UserError(f"{data}: no {split} problems for {env_cls.name}")
    return problems


def problems_fingerprint(problems: list[Problem]) -> str:
    """The problems' content, hashed: a resume notices data changed under the run, `compare` that its cache is stale
    (ids repeat across seeds: `test-0` of seed 1 is another question than of seed 0)."""
    text = json.dumps([[p.id, p.question, str(p.answer)] for p in problems])
    return hashlib.sha256(text.encode()).hexdigest()[:16]
