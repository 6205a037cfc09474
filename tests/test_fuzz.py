"""Spec fuzzing: mutated experiment files never crash `validate` or `train` (issue 7).

Every mutation of experiments/smoke.yaml (dropped, added, retyped and renamed keys,
out-of-range numbers, broken YAML, binary junk) either still validates, or makes both commands
exit 2 with a one-line message and no traceback; `train` must fail before any weight loads.
The CLI runs in-process (`pettingllms_cli.cli.main`), so each example takes milliseconds.
"""

from __future__ import annotations

import io
import json
import sys
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from unittest import mock

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
BASE = yaml.safe_load((ROOT / "experiments" / "smoke.yaml").read_text())

scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=12)
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=6
)
bad_numbers = st.sampled_from(
    [0, -1, -(10**9), 10**12, 2**64, 0.0, -0.5, 1e308, float("inf"), float("-inf"), float("nan"), 1.5, "1e-2"]
)


def paths(tree: object, prefix: tuple = ()) -> list[tuple]:
    """Every key path of a nested mapping (list items included by index)."""
    found = []
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else []
    for key, value in items:
        found.append((*prefix, key))
        found += paths(value, (*prefix, key))
    return found


def parent(tree: dict, path: tuple) -> object:
    node = tree
    for key in path[:-1]:
        node = node[key]
    return node


def copy_tree() -> dict:
    return yaml.safe_load(yaml.safe_dump(BASE))


@st.composite
def tree_mutation(draw: st.DrawFn) -> bytes:
    """Apply 1-3 structural mutations to the smoke spec and dump it as YAML."""
    tree = copy_tree()
    for _ in range(draw(st.integers(1, 3))):
        candidates = paths(tree)
        if not candidates:
            break
        path = draw(st.sampled_from(candidates))
        node = parent(tree, path)
        key = path[-1]
        kind = draw(st.sampled_from(["drop", "add", "retype", "rename", "number"]))
        if kind == "drop":
            del node[key]
        elif kind == "add" and isinstance(node, dict):
            node[draw(st.text(min_size=1, max_size=10))] = draw(values)
        elif kind == "rename" and isinstance(node, dict):
            node[draw(st.text(min_size=1, max_size=10))] = node.pop(key)
        elif kind == "number":
            node[key] = draw(bad_numbers)
        else:
            node[key] = draw(values)
    return yaml.safe_dump(tree, allow_unicode=True).encode()


@st.composite
def text_mutation(draw: st.DrawFn) -> bytes:
    """Break the YAML text: cut it, insert or delete characters, or swap in binary junk."""
    text = (ROOT / "experiments" / "smoke.yaml").read_bytes()
    kind = draw(st.sampled_from(["cut", "insert", "delete", "junk", "prefix"]))
    at = draw(st.integers(0, len(text)))
    if kind == "cut":
        return text[:at]
    if kind == "insert":
        return (
            text[:at]
            + draw(
                st.sampled_from([b":", b"{", b"[", b"\t", b"- ", b"'", b'"', b"&a", b"*a", b"!!python/object:os.system", b"\n  "])
            )
            + text[at:]
        )
    if kind == "delete":
        return text[:at] + text[at + draw(st.integers(1, 20)) :]
    if kind == "junk":
        return draw(st.binary(max_size=200))
    return draw(st.sampled_from([b"", b"- a\n", b"42\n", b"null\n", b"\xff\xfe", b"a: [\n", b"%YAML 9\n"])) + text


def run_cli(*args: str) -> tuple[int, str]:
    """Run `pettingllms ARGS` in-process; returns (exit code, stderr)."""
    from pettingllms_cli.cli import main

    err = io.StringIO()
    with mock.patch.object(sys, "argv", ["pettingllms", *args]), redirect_stdout(io.StringIO()), redirect_stderr(err):
        try:
            main()
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return code, err.getvalue()


def assert_one_line_error(code: int, stderr: str, what: str) -> None:
    lines = stderr.strip().splitlines()  # str.splitlines also splits at \x1c-\x1e, \x85, \u2028
    assert code == 2, f"{what}: exit {code}, stderr {stderr!r}"
    assert len(lines) == 1 and lines[0].startswith("error:"), f"{what}: not one error line: {stderr!r}"
    assert "Traceback" not in stderr


def no_weights(*args: object, **kwargs: object) -> None:
    raise AssertionError("train loaded weights for a spec that does not validate")


def check(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp, mock.patch("pettingllms_cli.training.loop.Team", no_weights):
        spec = Path(tmp) / "exp.yaml"
        spec.write_bytes(content)
        code, err = run_cli("validate", str(spec))
        if code == 0:
            return  # the mutation is still a valid spec: training it is not this test's business
        assert_one_line_error(code, err, "validate")
        code, err = run_cli("train", str(spec), "--out", str(Path(tmp) / "run"))  # no --max-steps: it could mend the spec
        assert_one_line_error(code, err, "train")
        assert not (Path(tmp) / "run").exists(), "train touched the run directory before validating"


@pytest.fixture(scope="module", autouse=True)
def _imported() -> None:
    import pettingllms_cli.training.loop  # noqa: F401  (import once, outside hypothesis' timing)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree_mutation())
def test_mutated_spec_is_valid_or_one_line_error(content: bytes) -> None:
    check(content)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text_mutation())
def test_broken_yaml_is_one_line_error(content: bytes) -> None:
    check(content)


@settings(max_examples=30, deadline=None)
@given(
    key=st.sampled_from(
        ["train.steps", "seed", "algorithm.group_size", "agents.caller.roles", "env", "models.tiny.source", "x.y.z"]
    )
    | st.text(max_size=15),
    value=st.text(max_size=15),
)
def test_set_override_is_valid_or_one_line_error(key: str, value: str) -> None:
    with tempfile.TemporaryDirectory() as tmp, mock.patch("pettingllms_cli.training.loop.Team", no_weights):
        code, err = run_cli("validate", str(ROOT / "experiments" / "smoke.yaml"), "--set", f"{key}={value}")
        if code == 0:
            return
        assert_one_line_error(code, err, "validate --set")
        code, err = run_cli("train", str(ROOT / "experiments" / "smoke.yaml"), "--out", tmp + "/run", "--set", f"{key}={value}")
        assert_one_line_error(code, err, "train --set")


@pytest.mark.parametrize(
    "args",
    [
        ["--max-steps", "0"],
        ["--seed", "-1"],
        ["--force"],
        ["--resume", "--overwrite"],
        ["--set", "train"],
        ["--set", "name=3"],
    ],
)
def test_bad_train_options_are_one_line_errors(args: list[str], tmp_path: Path) -> None:
    with mock.patch("pettingllms_cli.training.loop.Team", no_weights):
        code, err = run_cli("train", str(ROOT / "experiments" / "smoke.yaml"), "--out", str(tmp_path / "run"), *args)
    assert_one_line_error(code, err, " ".join(args))
    assert not (tmp_path / "run").exists()


# --- model output: any reply is a step, never an exception (issue 17) ------------------------------
# Pieces a hostile or broken model might emit, glued together with random unicode (lone surrogates too).
PIECES = [
    "<tool_call>",
    "</tool_call>",
    '{"name": "calculator", "arguments": {"expression": "',
    '{"name": "sql", "arguments": {"query": "',
    '"}}',
    "```python\n",
    "```",
    "Answer: ",
    "Moves: ",
    "Solution: ",
    "Function: ",
    "assert ",
    "\n",
    "9" * 5000,
    "1e999",
    "NaN",
    "Infinity",
    "[" * 40,
    "]" * 40,
    "{" * 40,
    "1e5**64",
    "1e300**2",
    "\ud800",
    "\x00",
    "\u202e",
    "\ufeff",
    "print(1)",
    "U D L R",
]
ARITH = st.recursive(
    st.sampled_from(["0", "1", "2", "9", "64", "0.5", "1e-320", "1e5", "1e15", "1e300", "1e999", "-1", "10**15"]),
    lambda inner: st.tuples(inner, st.sampled_from(["+", "-", "*", "/", "//", "%", "**", "^"]), inner).map(
        lambda t: f"({t[0]}{t[1]}{t[2]})"
    ),
    max_leaves=6,
)
CALC_CALL = ARITH.map(lambda e: '<tool_call>{"name": "calculator", "arguments": {"expression": "' + e + '"}}</tool_call>')
JSON_VALUE = st.recursive(  # raw JSON text, with what Python's json accepts but later code chokes on
    st.sampled_from(["9" * 5000, "NaN", "-Infinity", "1e999", '"\\ud800"', '"x"', "1", "null", "[" * 900 + "]" * 900]),
    lambda inner: (
        st.lists(inner, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]")
        | st.lists(inner, max_size=3).map(lambda xs: "{" + ", ".join(f'"k{i}": {x}' for i, x in enumerate(xs)) + "}")
    ),
    max_leaves=5,
)
JSON_CALL = st.tuples(st.sampled_from(["calculator", "sql", "f"]), st.sampled_from(["expression", "query", "a"]), JSON_VALUE).map(
    lambda t: '<tool_call>{"name": "' + t[0] + '", "arguments": {"' + t[1] + '": ' + t[2] + "}}</tool_call>"
)
UNICODE = st.text(alphabet=st.characters(exclude_categories=()), max_size=30)
MODEL_TEXT = CALC_CALL | JSON_CALL | st.lists(st.sampled_from(PIECES) | UNICODE | ARITH, max_size=8).map("".join)
SANDBOX_ENVS = {"code_v0", "sudoku4x4_v0", "plan_path_v0", "sokoban_v0"}  # each action spawns a process: fewer examples


def play_hostile(env_name: str, texts: list[str]) -> None:
    """Play every layout of the env with these replies (cycled) to the end; rewards stay finite."""
    import json
    import math

    from pettingllms_cli.envs import ENVS

    env_cls = ENVS[env_name]
    problem = env_cls.load_problems("generated", "train", 0, 1)[0]
    for layout in env_cls.layouts:
        env, i = env_cls(problem, layout, 2), 0
        while not env.done:
            result = env.step(env.current_role, texts[i % len(texts)])
            i += 1
            assert math.isfinite(result.local_reward) and math.isfinite(result.team_reward)
            env = env.copy()  # tree sampling deep-copies the env after each action
        json.dumps(env.state(), allow_nan=False)


@pytest.mark.parametrize("env_name", sorted({"math_tool_v0", "function_call_v0", "sql_v0"}))
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(MODEL_TEXT, min_size=1, max_size=4))
def test_any_model_text_is_a_step(env_name: str, texts: list[str]) -> None:
    play_hostile(env_name, texts)


@pytest.mark.parametrize("env_name", sorted(SANDBOX_ENVS))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(MODEL_TEXT, min_size=1, max_size=2))
def test_any_model_text_is_a_step_in_sandbox_envs(env_name: str, texts: list[str]) -> None:
    play_hostile(env_name, texts)


# --- data files: any record loads, or is one UserError; a loaded problem can be played (issue 17) --------
FN = {"name": "f", "description": "d", "parameters": {"properties": {"x": {"type": "integer"}}, "required": ["x"]}}
MBPP = {"text": "Add.", "code": "def add(a, b):\n    return a + b", "test_list": ["assert add(1, 2) == 3"], "task_id": 1}
HUMANEVAL = {
    "task_id": "h/0",
    "prompt": "def inc(x):\n",
    "canonical_solution": "    return x + 1\n",
    "test": "def check(candidate):\n    assert candidate(1) == 2\n",
    "entry_point": "inc",
}
VALID_DATA = {  # env -> (question records, BFCL answer records or None); each fuzz example breaks a few fields
    "math_tool_v0": ([{"question": "q", "answer": "#### 3"}, {"question": "r", "answer": "so #### 4"}], None),
    "code_v0": ([MBPP, HUMANEVAL, {**MBPP, "task_id": 2, "test_setup_code": "y = 1"}], None),
    "sql_v0": (
        [{"question": "How many?", "sql": "SELECT COUNT(*) FROM products"}, {"question": "Top?", "sql": "SELECT 1"}],
        None,
    ),
    "plan_path_v0": ([{"grid": ["S..", ".#.", "..G"]}, {"grid": ["S.G"]}], None),
    "sokoban_v0": ([{"grid": ["#####", "#PBT#", "#####"]}, {"grid": ["######", "#P_BT#", "######"]}], None),
    "function_call_v0": (
        [{"id": i, "question": "q", "function": [FN]} for i in ("a", "b")],
        [{"id": i, "ground_truth": [{"f": {"x": [1, ""]}}]} for i in ("a", "b")],
    ),
}
JSON_DATA = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=5,
)


@st.composite
def broken(draw: st.DrawFn, records: list[dict]) -> list[dict]:
    """The records with 0-2 fields (at any depth) deleted or replaced by random JSON."""
    tree = json.loads(json.dumps(records))
    for _ in range(draw(st.integers(0, 2))):
        candidates = [p for p in paths(tree) if len(p) > 1]
        if not candidates:
            break
        path = draw(st.sampled_from(candidates))
        node = parent(tree, path)
        if draw(st.booleans()) and isinstance(node, dict):
            del node[path[-1]]
        else:
            node[path[-1]] = draw(JSON_DATA)
    return tree


def load_and_play(env_name: str, path: Path) -> None:
    """Both splits load, or fail as one UserError; the first loaded problem observes and steps in every layout."""
    from pettingllms_cli.envs import ENVS
    from pettingllms_cli.envs.loading import read_split
    from pettingllms_cli.errors import UserError

    env_cls = ENVS[env_name]
    try:
        problems = read_split(env_cls, str(path), "train", 0, 4) + read_split(env_cls, str(path), "test", 0, 4)
    except UserError:
        return
    for layout, roles in env_cls.layouts.items():
        env = env_cls(problems[0], layout, 1)
        for role in roles:
            env.observe(role)
            env.step(role, env.reference_action(role) if hasattr(env, "reference_action") else "")


def write_jsonl(path: Path, records: list) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.mark.parametrize("env_name", sorted(VALID_DATA))
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_data_file_loads_or_is_one_user_error(env_name: str, data: st.DataObject, tmp_path: Path) -> None:
    questions, answers = VALID_DATA[env_name]
    path = tmp_path / "data.json"
    write_jsonl(path, data.draw(broken(questions)))
    if answers is not None:
        write_jsonl(tmp_path / "data_answer.json", data.draw(broken(answers)))
    load_and_play(env_name, path)
