"""`code_v0`: write a Python function from a description; code runs in the sandbox.

Layouts:
- `multi`: `tester` writes assert-style tests (one `assert` per line), then `coder` writes the
  function with those tests in its prompt. The coder's code runs against the hidden reference
  tests and the tester's tests; on a retry the coder sees the first of the tester's valid tests
  (those the reference passes) that it failed, and the tester sees the code.
- `single`: `coder` writes the function alone.

Rewards per action: team = share of hidden tests the current code passes (solved when all
pass). Local: coder = share of the tester's valid tests it passes (0 without any),
`CODE_DOES_NOT_LOAD` (-0.1) if the code does not even load; tester = `score_tests`: the share
of its asserts that the reference passes, times the share of wrong programs derived from the
reference (`mutants`: an off-by-one, a swapped operator, a constant return, an empty body; those
that fail a hidden test) that one of those asserts fails, `NO_ASSERT` (-0.1) if it wrote no
assert. So `assert f(1) is not None` catches only the empty body and earns less than a test that
separates the reference from its mutants. A tester action runs the sandbox once for the reference
and once per mutant (each mutant's hidden-test run is cached per problem).

Data: `generated` (a built-in sample: 20 MBPP problems, CC-BY-4.0, and 6 HumanEval-format
problems written for this project), or a JSON-lines file in MBPP format (`text`, `code`,
`test_list`, optional `test_setup_code`, `task_id`) or HumanEval format (`prompt`, `test`,
`entry_point`, `canonical_solution`, `task_id`). Option `timeout` (default 3 s) limits each
sandbox run. Verdicts: the code runs in one sandbox and the tests in another, which calls the
code through a proxy that returns plain data (`tools.proxy`); the model's code never runs where
a verdict is decided. The hidden tests and the tester's asserts (model code too) run in separate
judges, so a tester's assert cannot touch a hidden test's verdict.
"""

from __future__ import annotations

import ast
import copy
import functools
import itertools
import re
from collections.abc import Sequence
from pathlib import Path

from pydantic import Field

from pettingllms_cli.envs.base import EnvOptions, Message, Outcome, Problem, TurnEnv, read_jsonl, split_records
from pettingllms_cli.envs.rewards import CODE_DOES_NOT_LOAD, NO_ASSERT
from pettingllms_cli.errors import UserError
from pettingllms_cli.tools.calls import strip_tool_results
from pettingllms_cli.tools.proxy import run_proxied

DATA_DIR = Path(__file__).parent / "data"
SAMPLES = (DATA_DIR / "mbpp_sample.jsonl", DATA_DIR / "humaneval_sample.jsonl")
CODE_PREFIX = "```python\n"
CODER_SYSTEM = "Write the Python function. Reply with code only."
TESTER_SYSTEM = "Write assert tests for the function, one per line."
MAX_TESTS = 8
# The closing fence starts a line: a ``` inside a comment or a string does not end the code.
_FENCE_RE = re.compile(r"```(?:python|py)?\n?(.*?)(?:^[ \t]*```|\Z)", re.DOTALL | re.MULTILINE)


def extract_code(text: str) -> str:
    """The first fenced code block, or the whole text without fences.

    >>> extract_code("```python\\ndef f():\\n    return 1\\n```\\nmore")
    'def f():\\n    return 1\\n'
    """
    match = _FENCE_RE.search(text)
    return match.group(1) if match else text


def extract_asserts(text: str) -> list[str]:
    """One-line `assert` statements of the reply (at most MAX_TESTS).

    >>> extract_asserts("```python\\nassert f(1) == 2\\nprint(3)\\n  assert f(2) == 3\\n```")
    ['assert f(1) == 2', 'assert f(2) == 3']
    """
    lines = [line.strip() for line in extract_code(text).splitlines()]
    return [line for line in lines if line.startswith("assert ")][:MAX_TESTS]


@functools.lru_cache(maxsize=4096)
def run_tests(code: str, tests: tuple[str, ...], setup: str = "", timeout: float = 3.0) -> tuple[bool, tuple[bool, ...]]:
    """(code loaded, pass/fail per test): the code runs in one sandbox, the setup and tests in another (`tools.proxy`).

    The setup (trusted data) and the tests call the code's names through a proxy that returns plain data, so
    the code cannot print, forge or kill its way to a verdict; a crash or a hang fails the tests still to run.
    """
    return run_proxied(code, tests, setup, timeout)


def stub(entry: str) -> str:
    """A wrong solution: the right name, returns None."""
    return f"def {entry}(*args, **kwargs):\n    return None\n"


_SWAPS = {
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add, ast.Div: ast.Mult, ast.FloorDiv: ast.Mult, ast.Mod: ast.FloorDiv,
    ast.Lt: ast.Gt, ast.Gt: ast.Lt, ast.LtE: ast.GtE, ast.GtE: ast.LtE, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
    ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.And: ast.Or, ast.Or: ast.And,
}  # fmt: skip


@functools.lru_cache(maxsize=1024)
def mutants(reference: str, entry: str) -> tuple[str, ...]:
    """Wrong programs derived from the reference: an off-by-one (the first int literal + 1), a swapped operator
    (the first one), a constant return and an empty body (the entry redefined after the reference).

    >>> for m in mutants("def f(x):\\n    return x + 1", "f"):
    ...     print(m.splitlines()[-1].strip())
    return x + 2
    return x - 1
    return 0
    pass
    """
    out = []
    try:
        tree = ast.parse(reference)
    except SyntaxError:
        tree = None
    for mutate in (_off_by_one, _swap_operator) if tree else ():
        changed = mutate(copy.deepcopy(tree))
        if changed is not None:
            out.append(ast.unparse(changed))
    redefined = f"{reference}\n\ndef {entry}(*args, **kwargs):\n"
    out += [redefined + "    return 0\n", redefined + "    pass\n"]
    return tuple(dict.fromkeys(m for m in out if m != reference))


def _off_by_one(tree: ast.Module) -> ast.Module | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and type(node.value) is int:
            node.value += 1
            return tree
    return None


def _swap_operator(tree: ast.Module) -> ast.Module | None:
    for node in ast.walk(tree):
        if isinstance(node, (ast.BinOp, ast.BoolOp, ast.AugAssign)) and type(node.op) in _SWAPS:
            node.op = _SWAPS[type(node.op)]()
            return tree
        if isinstance(node, ast.Compare) and type(node.ops[0]) in _SWAPS:
            node.ops[0] = _SWAPS[type(node.ops[0])]()
            return tree
    return None


def score_tests(on_reference: Sequence[bool], on_wrong: Sequence[Sequence[bool]]) -> float:
    """Share of the asserts that pass the reference, times the share of wrong programs one of those fails.

    on_wrong[m][t]: assert t passes on wrong program m. With no wrong program, validity alone counts.

    >>> score_tests([True], [[False], [False], [False], [False]])  # one test that separates
    1.0
    >>> score_tests([True], [[True], [True], [False], [False]])  # `assert f(1) is not None`
    0.5
    >>> score_tests([True, False], [[False, False], [True, False]])  # a test the reference fails catches nothing
    0.25
    """
    if not on_reference:
        return 0.0
    valid = [t for t, ok in enumerate(on_reference) if ok]
    caught = [any(not passes[t] for t in valid) for passes in on_wrong]
    return len(valid) / len(on_reference) * (sum(caught) / len(caught) if caught else 1.0)


class CodeOptions(EnvOptions):
    timeout: float = Field(3.0, gt=0, description="Seconds each sandboxed test run may take.")


class CodeEnv(TurnEnv):
    Options = CodeOptions
    name = "code_v0"
    layouts = {"multi": ("tester", "coder"), "single": ("coder",)}
    deferred_roles = frozenset({"tester"})  # the team reward moves only once the coder acts
    runs_model_code = True

    def _reset_task(self) -> None:
        self.code: str | None = None
        self.tests: list[str] = []  # the tester's asserts
        self.valid: list[bool] = []  # per assert: the reference passes it
        self.hidden_share = 0.0
        self.feedback: str | None = None

    @property
    def meta(self) -> dict:
        return self.problem.meta

    @property
    def timeout(self) -> float:
        return self.opts.timeout

    # --- observations ---------------------------------------------------------------------
    def observe(self, role: str) -> list[Message]:
        task = self.problem.question
        if role == "tester":
            seen = f"\nCurrent code:\n{self.code[:600]}" if self.code else ""
            return [
                {"role": "system", "content": TESTER_SYSTEM},
                {"role": "user", "content": f"{self.meta.get('prompt_code') or task}\nFunction: {self.meta['entry']}{seen}"},
                {"role": "assistant", "content": CODE_PREFIX + "assert "},
            ]
        content = task + ("\nTests:\n" + "\n".join(self.tests) if self.tests else "")
        content = content if self.feedback is None else f"{content}\n{self.feedback}"
        return [
            {"role": "system", "content": CODER_SYSTEM},
            {"role": "user", "content": content},
            {"role": "assistant", "content": CODE_PREFIX + self.meta.get("prompt_code", "")},
        ]

    # --- actions ----------------------------------------------------------------------------
    def _act(self, role: str, text: str) -> Outcome:
        text = strip_tool_results(text)
        return self._write_tests(text) if role == "tester" else self._write_code(text)

    def _write_tests(self, text: str) -> Outcome:
        self.tests = extract_asserts(text)
        self.valid = []
        if not self.tests:
            return Outcome(NO_ASSERT, self.hidden_share, info={"tests": 0})
        tests, setup = tuple(self.tests), self.meta.get("setup", "")
        _, on_ref = run_tests(self.meta["reference"], tests, setup, self.timeout)
        on_wrong = [run_tests(m, tests, setup, self.timeout)[1] for m in self.wrong_programs]
        self.valid = list(on_ref)
        reward = score_tests(on_ref, on_wrong)
        info = {"tests": len(tests), "valid": sum(on_ref), "wrong_programs": len(on_wrong)}
        return Outcome(reward, self.hidden_share, info=info)

    @property
    def wrong_programs(self) -> list[str]:
        """The reference's mutants that fail a hidden test (a mutant that passes them all is not known to be wrong)."""
        hidden, setup = tuple(self.meta["tests"]), self.meta.get("setup", "")
        wrong = []
        for m in mutants(self.meta["reference"], self.meta["entry"]):
            loaded, passed = run_tests(m, hidden, setup, self.timeout)
            if not (loaded and all(passed)):
                wrong.append(m)
        return wrong

    def _write_code(self, text: str) -> Outcome:
        self.code = extract_code(text)
        hidden = tuple(self.meta["tests"])
        setup = self.meta.get("setup", "")
        loaded, on_hidden = run_tests(self.code, hidden, setup, self.timeout)
        on_visible = run_tests(self.code, tuple(self.tests), setup, self.timeout)[1] if self.tests else ()
        self.hidden_share = sum(on_hidden) / len(hidden)
        solved = all(on_hidden)
        valid = [ok for ok, v in zip(on_visible, self.valid, strict=True) if v]  # a test the reference fails says nothing
        local = CODE_DOES_NOT_LOAD if not loaded else (sum(valid) / len(valid) if valid else 0.0)
        self.feedback = None if solved else self._failure_note(loaded, on_hidden, on_visible)
        return Outcome(local, self.hidden_share, solved=solved, info={"hidden_passed": sum(on_hidden), "hidden": len(hidden)})

    def _failure_note(self, loaded: bool, on_hidden: tuple, on_visible: tuple) -> str:
        """What a retry may see: never the hidden tests, except the example shown in the task."""
        if not loaded:
            return "Your last code did not run. Try again."
        failed = [t for t, ok, v in zip(self.tests, on_visible, self.valid, strict=True) if v and not ok]
        if self.meta.get("example_shown") and not on_hidden[0]:
            failed.insert(0, self.meta["tests"][0])
        return f"Your last code failed: {failed[0]}" if failed else "Your last code failed hidden tests. Try again."

    # --- reference and corrupted actions ----------------------------------------------------
    def reference_action(self, role: str) -> str:
        if role == "tester":
            return CODE_PREFIX + "\n".join(self.meta["reference_asserts"]) + "\n```"
        return CODE_PREFIX + self.meta["reference"] + "\n```"

    def corrupted_actions(self, role: str) -> list[str]:
        """Failing code (raises) and a wrong solution; for the tester, a test that always fails."""
        if role == "tester":
            return [CODE_PREFIX + "assert False\n```"]
        entry = self.meta["entry"]
        return [CODE_PREFIX + f"def {entry}(*a, **k):\n    raise ValueError('no')\n```", CODE_PREFIX + stub(entry) + "```"]

    # --- data ---------------------------------------------------------------------------------
    @classmethod
    def load_problems(cls, data: str, split: str, seed: int, n: int, options: dict | None = None) -> list[Problem]:
        paths = SAMPLES if data == "generated" else (Path(data),)
        # Each file is split on its own, so the bundled sample holds out MBPP and HumanEval problems alike;
        # the splits are interleaved and every problem is kept.
        parts = [_split(load_code_file(path), split, path) for path in paths]
        return [p for group in itertools.zip_longest(*parts) for p in group if p is not None][:n]

    @staticmethod
    def data_error(problem: Problem) -> str | None:
        """Why a data record is unusable (its reference fails its own tests), naming file, record and field; else None."""
        meta = problem.meta
        loaded, passed = run_tests(meta["reference"], tuple(meta["tests"]), meta.get("setup", ""))
        source, (code_field, tests_field) = meta.get("source", problem.id), meta.get("fields", ("code", "test_list"))
        if not loaded:
            return f"{source}: the reference `{code_field}` does not load; fix or drop the record"
        failed = [i for i, ok in enumerate(passed) if not ok]
        if failed:
            test, at = " ".join(str(meta["tests"][failed[0]]).split())[:80], f"{tests_field}[{failed[0]}]"
            return f"{source}: `{at}` fails on the reference `{code_field}` ({test}); fix or drop the record"
        return None


def _split(problems: list[Problem], split: str, path: Path) -> list[Problem]:
    return split_records(problems, split, max(1, len(problems) // 5), path)


def load_code_file(path: Path) -> list[Problem]:
    problems = []
    for i, rec in enumerate(read_jsonl(path), 1):
        if {"prompt", "test", "entry_point"} <= rec.keys():
            problems.append(_humaneval(rec, path, i))
        elif {"text", "test_list"} <= rec.keys():
            problems.append(_mbpp(rec, path, i))
        else:
            raise UserError(
                f"{path}: record {i} is neither MBPP (`text`, `test_list`, `code`) "
                "nor HumanEval (`prompt`, `test`, `entry_point`)"
            )
    return problems


def _mbpp(rec: dict, path: Path, i: int) -> Problem:
    tests, code = rec["test_list"], rec.get("code")
    if not isinstance(tests, list) or not tests or not isinstance(code, str):
        raise UserError(f"{path}: record {i} needs a non-empty `test_list` and the reference `code` (MBPP format)")
    _require_strings(path, i, rec, ("text",), ("test_setup_code",))
    if not all(isinstance(t, str) for t in tests):
        raise UserError(f"{path}: record {i}: `test_list` must hold strings (assert statements)")
    names = re.findall(r"^def\s+(\w+)", code, re.MULTILINE)
    entry = next((n for n in names if n in tests[0]), names[0] if names else None)
    if entry is None:
        raise UserError(f"{path}: record {i}: the reference `code` defines no function")
    code = code.replace("\r\n", "\n").replace("\t", "    ")
    meta = {
        "entry": entry,
        "tests": tests,
        "reference": code,
        "setup": (rec.get("test_setup_code") or "").replace("\r\n", "\n"),
        "reference_asserts": [t for t in tests if "\n" not in t.strip()],
        "example_shown": True,
        "source": f"{path}: record {i}",
        "fields": ("code", "test_list"),
    }
    question = f"{rec['text']}\nExample: {tests[0]}"
    return Problem(f"mbpp-{rec.get('task_id', i)}", question, None, meta)


def _humaneval(rec: dict, path: Path, i: int) -> Problem:
    entry, prompt = rec["entry_point"], rec["prompt"]
    if not isinstance(rec.get("canonical_solution"), str):
        raise UserError(f"{path}: record {i} needs `canonical_solution` (the reference the checker replays)")
    _require_strings(path, i, rec, ("prompt", "test", "entry_point"))
    if not entry.isidentifier():
        raise UserError(f"{path}: record {i}: `entry_point` {entry[:40]!r} is not a Python function name")
    asserts = [
        line.strip().replace("candidate(", f"{entry}(") for line in rec["test"].splitlines() if line.strip().startswith("assert ")
    ]
    meta = {
        "entry": entry,
        "tests": [rec["test"] + f"\ncheck({entry})\n"],
        "reference": prompt + rec["canonical_solution"],
        "prompt_code": prompt,
        "setup": "",
        "reference_asserts": asserts,
        "example_shown": False,
        "source": f"{path}: record {i}",
        "fields": ("canonical_solution", "test"),
    }
    return Problem(str(rec.get("task_id", f"humaneval-{i}")), f"Complete the function {entry}.", None, meta)


def _require_strings(path: Path, i: int, rec: dict, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> None:
    """Fields that must be strings (optional ones may be missing or null): a UserError naming the first that is not."""
    for key in required + optional:
        value = rec.get(key)
        if not isinstance(value, str) and not (key in optional and value is None):
            raise UserError(f"{path}: record {i}: `{key}` must be a string, not {type(value).__name__}")
