"""`code_v0`: write a Python function from a description; code runs in the sandbox.

Layouts:
- `multi`: `tester` writes assert-style tests (one `assert` per line), then `coder` writes the
  function. The coder's code runs against the hidden reference tests and the tester's tests;
  on a retry the coder sees the first visible test it failed and the tester sees the code.
- `single`: `coder` writes the function alone.

Rewards per action: team = share of hidden tests the current code passes (solved when all
pass). Local: coder = share of the tester's tests it passes (0 without tests), -0.1 if the
code does not even load; tester = share of its asserts that the reference solution passes
and a wrong solution (a stub returning None) fails, -0.1 if it wrote no assert.

Data: `generated` (a built-in sample: 20 MBPP problems, CC-BY-4.0, and 6 HumanEval-format
problems written for this project), or a JSON-lines file in MBPP format (`text`, `code`,
`test_list`, optional `test_setup_code`, `task_id`) or HumanEval format (`prompt`, `test`,
`entry_point`, `canonical_solution`, `task_id`). Option `timeout` (default 3 s) limits each
sandbox run. Test results come back on stdout lines tagged with a random nonce; model code
that inspects the harness could forge them (best effort, like the sandbox's audit hook).
"""

from __future__ import annotations

import functools
import re
import secrets
from pathlib import Path

from pettingllms_cli.envs.base import Message, Outcome, Problem, TurnEnv, read_jsonl, split_records
from pettingllms_cli.errors import UserError
from pettingllms_cli.tools.calls import strip_tool_results
from pettingllms_cli.tools.sandbox import run_python

DATA_DIR = Path(__file__).parent / "data"
SAMPLES = (DATA_DIR / "mbpp_sample.jsonl", DATA_DIR / "humaneval_sample.jsonl")
CODE_PREFIX = "```python\n"
CODER_SYSTEM = "Write the Python function. Reply with code only."
TESTER_SYSTEM = "Write assert tests for the function, one per line."
MAX_TESTS = 8
_FENCE_RE = re.compile(r"```(?:python|py)?\n?(.*?)(?:```|$)", re.DOTALL)

HARNESS = """
import sys
_nonce = sys.stdin.readline().strip()
_ns = {{"__name__": "solution"}}
try:
    exec(compile({code!r} + "\\n" + {setup!r}, "solution.py", "exec"), _ns)  # setup may use the code's classes
except BaseException as e:
    print(_nonce, "load", type(e).__name__, flush=True)
    raise SystemExit(0)
for _i, _t in enumerate({tests!r}):
    try:
        exec(compile(_t, "test.py", "exec"), _ns)
        print(_nonce, _i, 1, flush=True)
    except BaseException as e:
        print(_nonce, _i, 0, type(e).__name__, flush=True)
"""


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
    """(code loaded, pass/fail per test) for code + tests in one sandbox run; a crash fails the rest."""
    nonce = secrets.token_hex(8)
    result = run_python(HARNESS.format(setup=setup, code=code, tests=list(tests)), stdin=nonce + "\n", timeout=timeout)
    passed, seen, load_failed = [False] * len(tests), False, False
    for line in result.stdout.splitlines():
        parts = line.split()
        if len(parts) < 3 or parts[0] != nonce:
            continue
        load_failed |= parts[1] == "load"
        if parts[1].isdigit() and int(parts[1]) < len(tests):
            passed[int(parts[1])], seen = parts[2] == "1", True
    loaded = not load_failed and (seen or not tests)  # no result line at all: it hung or crashed while loading
    return loaded, tuple(passed)


def stub(entry: str) -> str:
    """A wrong solution: the right name, returns None."""
    return f"def {entry}(*args, **kwargs):\n    return None\n"


class CodeEnv(TurnEnv):
    name = "code_v0"
    layouts = {"multi": ("tester", "coder"), "single": ("coder",)}
    deferred_roles = frozenset({"tester"})  # the team reward moves only once the coder acts

    def _reset_task(self) -> None:
        self.code: str | None = None
        self.tests: list[str] = []  # the tester's asserts
        self.hidden_share = 0.0
        self.feedback: str | None = None

    @property
    def meta(self) -> dict:
        return self.problem.meta

    @property
    def timeout(self) -> float:
        return float(self.options.get("timeout", 3.0))

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
        content = task if self.feedback is None else f"{task}\n{self.feedback}"
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
        if not self.tests:
            return Outcome(-0.1, self.hidden_share, info={"tests": 0})
        tests, setup = tuple(self.tests), self.meta.get("setup", "")
        _, on_ref = run_tests(self.meta["reference"], tests, setup, self.timeout)
        _, on_stub = run_tests(stub(self.meta["entry"]), tests, setup, self.timeout)
        good = sum(r and not s for r, s in zip(on_ref, on_stub, strict=True))
        return Outcome(good / len(tests), self.hidden_share, info={"tests": len(tests), "discriminating": good})

    def _write_code(self, text: str) -> Outcome:
        self.code = extract_code(text)
        hidden = tuple(self.meta["tests"])
        loaded, passed = run_tests(self.code, hidden + tuple(self.tests), self.meta.get("setup", ""), self.timeout)
        on_hidden, on_visible = passed[: len(hidden)], passed[len(hidden) :]
        self.hidden_share = sum(on_hidden) / len(hidden)
        solved = all(on_hidden)
        local = -0.1 if not loaded else (sum(on_visible) / len(on_visible) if on_visible else 0.0)
        self.feedback = None if solved else self._failure_note(loaded, on_hidden, on_visible)
        return Outcome(local, self.hidden_share, solved=solved, info={"hidden_passed": sum(on_hidden), "hidden": len(hidden)})

    def _failure_note(self, loaded: bool, on_hidden: tuple, on_visible: tuple) -> str:
        """What a retry may see: never the hidden tests, except the example shown in the task."""
        if not loaded:
            return "Your last code did not run. Try again."
        failed = [t for t, ok in zip(self.tests, on_visible, strict=True) if not ok]
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
        if data == "generated":
            mbpp, human = (load_code_file(p) for p in SAMPLES)
            problems = [p for pair in zip(mbpp, human, strict=False) for p in pair]  # interleaved + mbpp[len(human) :]
        else:
            problems = load_code_file(Path(data))
        return split_records(problems, split, max(1, len(problems) // 5))[:n]


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
    }
    question = f"{rec['text']}\nExample: {tests[0]}"
    return Problem(f"mbpp-{rec.get('task_id', i)}", question, None, meta)


def _humaneval(rec: dict, path: Path, i: int) -> Problem:
    entry, prompt = rec["entry_point"], rec["prompt"]
    if not isinstance(rec.get("canonical_solution"), str):
        raise UserError(f"{path}: record {i} needs `canonical_solution` (the reference the checker replays)")
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
    }
    return Problem(str(rec.get("task_id", f"humaneval-{i}")), f"Complete the function {entry}.", None, meta)
