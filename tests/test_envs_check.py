"""`envs check` on every registered env: references solve, corruptions fail, bad data is one clear line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pettingllms_cli.envs import ENVS
from pettingllms_cli.envs.checker import check_env
from pettingllms_cli.envs.function_call import FunctionCallEnv
from pettingllms_cli.envs.plan_path import PlanPathEnv
from pettingllms_cli.envs.sokoban import SokobanEnv
from pettingllms_cli.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data is not checked out beside the repo")


@pytest.mark.parametrize("name", sorted(ENVS))
def test_every_env_passes_its_checks_on_shipped_data(name):
    report = check_env(ENVS[name], limit=2)
    assert report.failures == [] and report.passed > 10


@needs_shared
def test_function_call_on_all_of_shared_bfcl():
    report = check_env(FunctionCallEnv, data=str(SHARED / "bfcl" / "simple_python_200.json"), limit=1000)
    assert report.ok and report.passed > 1000  # 200 problems x 2 layouts x (reference + corruptions)


@needs_shared
@pytest.mark.parametrize(
    ("name", "file"), [("code_v0", "mbpp/mbpp_train_validation.jsonl"), ("math_tool_v0", "gsm8k/test_200.jsonl")]
)
def test_shared_benchmark_files(name, file):
    report = check_env(ENVS[name], data=str(SHARED / file), limit=2)
    assert report.ok, report.failures


# --- the checker can fail ---------------------------------------------------------------------
class WrongReference(PlanPathEnv):
    name = "broken_reference_v0"

    def reference_action(self, role: str) -> str:
        return self.PLAN_PREFIX + "U"


class SharedStateCopy(PlanPathEnv):
    name = "broken_copy_v0"

    def copy(self):
        return self  # not independent: stepping the "copy" moves the original


class AcceptsAnything(PlanPathEnv):
    name = "broken_corruption_v0"

    def _judge(self, plan: str):
        outcome = super()._judge(plan)
        outcome.solved, self.feedback = True, None
        return outcome


@pytest.mark.parametrize(
    ("env_cls", "expected"), [(WrongReference, "reference"), (SharedStateCopy, "copy"), (AcceptsAnything, "corruption")]
)
def test_checker_catches_broken_envs(env_cls, expected):
    report = check_env(env_cls, limit=1)
    assert not report.ok and any(expected in f for f in report.failures)


# --- bad input: one line naming the file and record --------------------------------------------
def _write_bfcl(tmp_path: Path, answers: list[dict] | None) -> Path:
    q = tmp_path / "calls.json"
    add = {"name": "add", "parameters": {"properties": {"x": {"type": "integer"}}}}
    q.write_text("".join(json.dumps({"id": i, "question": "Add 1 and 2", "function": [add]}) + "\n" for i in "ab"))  # 2: a split
    if answers is not None:
        (tmp_path / "calls_answer.json").write_text("".join(json.dumps(a) + "\n" for a in answers))
    return q


def test_missing_bfcl_answer_file(tmp_path):
    with pytest.raises(UserError, match="calls.json: no answer file"):
        FunctionCallEnv.load_problems(str(_write_bfcl(tmp_path, None)), "train", 0, 5)


def test_bfcl_answer_missing_for_a_record(tmp_path):
    with pytest.raises(UserError, match="id 'a'.*record 1"):
        FunctionCallEnv.load_problems(str(_write_bfcl(tmp_path, [{"id": "b", "ground_truth": []}])), "train", 0, 5)


def test_bfcl_answers_in_possible_answer_folder(tmp_path):
    q = _write_bfcl(tmp_path, None)
    (tmp_path / "possible_answer").mkdir()
    (tmp_path / "possible_answer" / "calls.json").write_text(
        "".join(json.dumps({"id": i, "ground_truth": [{"add": {"x": [1]}}]}) + "\n" for i in "ab")
    )
    assert FunctionCallEnv.load_problems(str(q), "train", 0, 5)[0].answer == [{"add": {"x": [1]}}]


def test_code_file_in_wrong_format(tmp_path):
    bad = tmp_path / "code.jsonl"
    bad.write_text('{"text": "x", "test_list": ["assert f()"], "code": "def f(): return 1"}\n{"question": "?"}\n')
    with pytest.raises(UserError, match="code.jsonl: record 2 is neither MBPP"):
        ENVS["code_v0"].load_problems(str(bad), "train", 0, 5)


def test_not_json(tmp_path):
    bad = tmp_path / "x.jsonl"
    bad.write_text("{oops\n")
    with pytest.raises(UserError, match="line 1 is not valid JSON"):
        ENVS["code_v0"].load_problems(str(bad), "train", 0, 5)


@pytest.mark.parametrize(
    ("env_cls", "grid"),
    [(PlanPathEnv, ["S#.", "##.", "..G"]), (SokobanEnv, ["#####", "#PB_#", "#####", "#_T_#", "#####"])],
)
def test_unsolvable_puzzle_names_the_record(tmp_path, env_cls, grid):
    path = tmp_path / "puzzles.jsonl"
    path.write_text(
        json.dumps({"grid": ["S.G"] if env_cls is PlanPathEnv else ["#####", "#PBT#", "#####"]})
        + "\n"
        + json.dumps({"grid": grid})
        + "\n"
    )
    with pytest.raises(UserError, match="puzzles.jsonl: record 2: the puzzle has no solution"):
        env_cls.load_problems(str(path), "train", 0, 5)


# --- the CLI ------------------------------------------------------------------------------------
def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pettingllms_cli", "envs", "check", *args], capture_output=True, text=True, cwd=ROOT
    )


def test_cli_envs_check_reports_counts():
    result = _cli("sql_v0", "--limit", "2")
    assert result.returncode == 0 and " passed, 0 failed" in result.stdout


def test_cli_envs_check_bad_data_is_one_line(tmp_path):
    result = _cli("function_call_v0", "--data", str(_write_bfcl(tmp_path, None)))
    assert result.returncode == 2 and "no answer file" in result.stderr and "Traceback" not in result.stderr


@needs_shared
def test_check_says_how_many_of_the_files_problems_it_replayed():
    report = check_env(FunctionCallEnv, data=str(SHARED / "bfcl" / "simple_python_200.json"), limit=3)
    assert (report.checked, report.available) == (6, 200)
    assert check_env(FunctionCallEnv, limit=3).available is None  # generated data has no fixed size
