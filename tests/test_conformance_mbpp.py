"""code_v0 judges MBPP code as MBPP's own harness does (issue 34): the same verdict on every candidate kind.

The oracle is the official MBPP harness: the test setup, the candidate's code and the record's asserts run as one
program in a fresh Python process with a time limit; the candidate passes when that program exits 0 in time.
The env runs the code in its sandbox and the asserts in a separate judge (`tools.proxy`); a candidate solves the
problem when every hidden test passes. Candidates over the 20 MBPP fixture records: the canonical solution, the
canonical one after a comment holding a code fence, a broken one (its return value changed), a hard-coded one
(returns the first assert's expected value), one returning None, and on a few records one that hangs, one that
raises and the canonical one printing 20 kB.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from pettingllms_cli.envs.code import CODE_PREFIX, CodeEnv, load_code_file
from pettingllms_cli.tools import sandbox

pytestmark = pytest.mark.skipif(bool(sandbox.probe().missing()), reason="this kernel lacks what strict mode needs")
FIXTURE = Path(__file__).parent / "data" / "mbpp_20.jsonl"
TIMEOUT = 2.0  # seconds, for the env's sandbox runs and the harness alike
PERTURB = """
def _perturbed(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, (str, list, tuple)):
        return value + value[:1] if value else value + type(value)("x" if isinstance(value, str) else [0])
    return None if value is not None else 0
"""


# --- the oracle: MBPP's harness --------------------------------------------------------------------------------
def harness_passes(record: dict, code: str) -> bool:
    """Setup, code and asserts as one program in a fresh interpreter: it passes when it exits 0 in time."""
    program = "\n".join([record.get("test_setup_code") or "", code, *record["test_list"]])
    try:
        done = subprocess.run([sys.executable, "-c", program], capture_output=True, timeout=TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0


# --- candidates -------------------------------------------------------------------------------------------------
def entry_of(record: dict) -> str:
    """The function the asserts call (the first one they name that the code defines)."""
    with warnings.catch_warnings():  # a record's own invalid escape sequences are not this test's business
        warnings.simplefilter("ignore", SyntaxWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        tree = ast.parse(record["code"])
    defined = [n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    return next(n for n in defined if f"{n}(" in record["test_list"][0])


def first_expected(record: dict) -> str:
    """The expected value of the first assert (`assert f(x) == E` gives `E`), as source."""
    test = ast.parse(record["test_list"][0]).body[0].test
    return ast.unparse(test.comparators[-1] if isinstance(test, ast.Compare) else ast.Constant(True))


def candidates(record: dict, few: bool) -> list[tuple[str, str]]:
    """(kind, code) for one record."""
    code, entry = record["code"].replace("\r\n", "\n"), entry_of(record)
    wrapper = f"_reference = {entry}\n\ndef {entry}(*args, **kwargs):\n    return _perturbed(_reference(*args, **kwargs))\n"
    broken = f"{code}\n{PERTURB}\n{wrapper}"
    kinds = [("canonical", code), ("broken", broken), ("canonical, a fence in a comment", f"# keep ``` out\n{code}")]
    kinds += [("hard-coded", f"def {entry}(*args, **kwargs):\n    return {first_expected(record)}\n")]
    kinds += [("returns None", f"def {entry}(*args, **kwargs):\n    return None\n")]
    if few:
        kinds += [("canonical, prints 20 kB", f"print('x' * 20_000)\n{code}")]  # output size never changes a verdict
        kinds += [("hangs", f"def {entry}(*args, **kwargs):\n    while True:\n        pass\n")]
        kinds += [("raises", f"def {entry}(*args, **kwargs):\n    raise ValueError('no')\n")]
    return kinds


def env_solves(problem, code: str) -> tuple[bool, float]:
    env = CodeEnv(problem, "single", 1, {"timeout": TIMEOUT})
    result = env.step("coder", CODE_PREFIX + code + "\n```")
    return env.success, result.team_reward


# --- the test ---------------------------------------------------------------------------------------------------
def test_every_candidate_gets_the_harness_verdict() -> None:
    records = [json.loads(line) for line in FIXTURE.read_text().splitlines() if line.strip()]
    problems = load_code_file(FIXTURE)
    assert len(records) == len(problems) == 20
    seen: dict[str, set[bool]] = {}
    for i, (record, problem) in enumerate(zip(records, problems, strict=True)):
        for kind, code in candidates(record, few=i < 4):
            official = harness_passes(record, code)
            solved, share = env_solves(problem, code)
            assert bool(solved) is official, (record["task_id"], kind, official)
            assert (share == 1.0) is official
            seen.setdefault(kind, set()).add(official)
    # The candidate kinds do what they are for: the canonical ones pass, the hanging and raising ones fail.
    assert seen["canonical"] == seen["canonical, prints 20 kB"] == seen["canonical, a fence in a comment"] == {True}
    assert seen["hangs"] == seen["raises"] == seen["returns None"] == {False}
    assert False in seen["broken"] and False in seen["hard-coded"]
