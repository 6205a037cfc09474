"""Bad data and model files end as one line naming the file, record and field, and surface early (issue 17, 16).

Every case here once gave a traceback, a silent wrong split, or an error only after the run
directory and the models existed: BFCL/MBPP/HumanEval records of the wrong type, a random-bytes
`.gguf`, `group_size: 1000000`, an agent name ending in a newline, a 1-record file, a held-out
split smaller than `env.eval_problems`, an uncached hub id offline (tests/test_hub_models.py has the rest).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from pettingllms_cli.envs import ENVS
from pettingllms_cli.envs.base import split_records
from pettingllms_cli.envs.checker import check_env
from pettingllms_cli.envs.code import SAMPLES, CodeEnv
from pettingllms_cli.envs.function_call import FunctionCallEnv
from pettingllms_cli.envs.math_tool import MathToolEnv
from pettingllms_cli.errors import UserError
from tests.conftest import EXPERIMENTS, run_cli

SMOKE = EXPERIMENTS / "smoke.yaml"
FN = {"name": "f", "description": "d", "parameters": {"properties": {"x": {"type": "integer"}}, "required": ["x"]}}
MBPP = {"text": "Add.", "code": "def add(a, b):\n    return a + b", "test_list": ["assert add(1, 2) == 3"]}
HUMANEVAL = {
    "prompt": "def inc(x):\n",
    "canonical_solution": "    return x + 1\n",
    "test": "def check(candidate):\n    assert candidate(1) == 2\n",
    "entry_point": "inc",
}


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def one_line_error(capsys: pytest.CaptureFixture, code: int) -> str:
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("error:"), (code, err)
    assert "Traceback" not in err
    return err


# --- records of the wrong type --------------------------------------------------------------------
def bfcl(tmp_path: Path, first: dict) -> Path:
    """A two-record BFCL question file (the first one under test) and its answer file."""
    write_jsonl(tmp_path / "q_answer.json", [{"id": i, "ground_truth": [{"f": {"x": [1]}}]} for i in ("a", "b")])
    return write_jsonl(
        tmp_path / "q.json",
        [{"id": "a", "question": "q", "function": [FN], **first}, {"id": "b", "question": "q", "function": [FN]}],
    )


@pytest.mark.parametrize(
    ("first", "field"),
    [
        ({"question": 5}, "`question`"),
        ({"question": [[5], {"role": "system", "content": "x"}]}, "`question`"),
        ({"function": [{**FN, "parameters": "x"}]}, "`parameters`"),
        ({"function": [{**FN, "parameters": {"properties": "x"}}]}, "`parameters.properties`"),
        ({"function": [{**FN, "parameters": {"properties": {"x": {}}, "required": 3}}]}, "`parameters.required`"),
        ({"function": [{**FN, "parameters": {"properties": {"y": {}}}}]}, "not in its `parameters.properties`"),
    ],
)
def test_bad_bfcl_record_names_file_record_and_field(tmp_path: Path, first: dict, field: str) -> None:
    with pytest.raises(UserError) as e:
        FunctionCallEnv.load_problems(str(bfcl(tmp_path, first)), "train", 0, 5)
    assert "q" in str(e.value) and field in str(e.value)
    assert "record 1" in str(e.value) or "id 'a'" in str(e.value)


@pytest.mark.parametrize(
    ("record", "field"),
    [
        ({**MBPP, "test_list": 5}, "`test_list`"),
        ({**MBPP, "test_list": [5]}, "`test_list`"),
        ({**MBPP, "test_setup_code": 5}, "`test_setup_code`"),
        ({**MBPP, "text": 7}, "`text`"),
        ({**HUMANEVAL, "prompt": None}, "`prompt`"),
        ({**HUMANEVAL, "entry_point": 5}, "`entry_point`"),
        ({**HUMANEVAL, "entry_point": "not a name"}, "`entry_point`"),
        ({**HUMANEVAL, "test": 5}, "`test`"),
    ],
)
def test_bad_code_record_names_file_record_and_field(tmp_path: Path, record: dict, field: str) -> None:
    data = write_jsonl(tmp_path / "code.jsonl", [record, MBPP])
    with pytest.raises(UserError, match=r"code\.jsonl: record 1"):
        CodeEnv.load_problems(str(data), "train", 0, 5)
    with pytest.raises(UserError) as e:
        CodeEnv.load_problems(str(data), "test", 0, 5)
    assert field in str(e.value)


def test_envs_check_on_bad_records_is_one_line_exit_2(tmp_path: Path, monkeypatch, capsys) -> None:
    data = write_jsonl(tmp_path / "he.jsonl", [{**HUMANEVAL, "entry_point": 5}, HUMANEVAL])
    err = one_line_error(capsys, run_cli(["envs", "check", "code_v0", "--data", str(data)], monkeypatch))
    assert "he.jsonl: record 1" in err and "`entry_point`" in err


def test_a_broken_mbpp_test_is_named_by_file_record_and_field(tmp_path: Path) -> None:
    broken = {**MBPP, "test_list": ["assert add(1, 2) == 3", "assert add(2, 2) == 5"]}
    data = write_jsonl(tmp_path / "mbpp.jsonl", [MBPP, broken])
    report = check_env(CodeEnv, data=str(data), limit=2)
    refs = [f for f in report.failures if "reference does not solve" in f]
    assert refs and all("mbpp.jsonl: record 2" in f and "`test_list[1]`" in f and "add(2, 2) == 5" in f for f in refs)


@pytest.mark.parametrize(
    ("content", "why"),
    [("[" * 100_000, "nested too deeply"), ('{"question": ' + "9" * 5000 + "}", "4300 digits"), ("\x00\xff", "not valid JSON")],
)
def test_unreadable_json_lines_are_one_line(tmp_path: Path, content: str, why: str) -> None:
    data = tmp_path / "gsm.jsonl"
    data.write_text(content + "\n")
    with pytest.raises(UserError, match=r"gsm\.jsonl: line 1 is not valid JSON") as e:
        MathToolEnv.load_problems(str(data), "train", 0, 5)
    assert why in str(e.value)


# --- splits -----------------------------------------------------------------------------------------
def test_one_record_cannot_be_both_train_and_test(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="1 record"):
        split_records([1], "train", 1, "one.jsonl")
    data = write_jsonl(tmp_path / "one.jsonl", [{"question": "q", "answer": "#### 3"}])
    with pytest.raises(UserError, match=r"one\.jsonl: 1 record\(s\).*at least 2"):
        MathToolEnv.load_problems(str(data), "train", 0, 5)
    two = split_records([1, 2], "train", 1), split_records([1, 2], "test", 1)
    assert two == ([1], [2])


def test_the_bundled_code_sample_yields_all_of_its_problems() -> None:
    lines = sum(1 for path in SAMPLES for line in path.read_text().splitlines() if line.strip())
    train = CodeEnv.load_problems("generated", "train", 0, 10_000)
    test = CodeEnv.load_problems("generated", "test", 0, 10_000)
    ids = [p.id for p in train + test]
    assert len(ids) == len(set(ids)) == lines  # every problem once, none dropped by zipping unequal files
    assert any(p.id.startswith("mbpp") for p in test) and any(not p.id.startswith("mbpp") for p in test)


@pytest.mark.parametrize("seed", [0, 1, 5])
def test_generated_train_and_test_expressions_are_disjoint(seed: int) -> None:
    train = {p.meta["expression"] for p in MathToolEnv.load_problems("generated", "train", seed, 10_000)}
    test = {p.meta["expression"] for p in MathToolEnv.load_problems("generated", "test", seed, 64)}
    assert len(test) > 16 and not train & test


@pytest.mark.parametrize("name", ["sudoku4x4_v0", "plan_path_v0", "sokoban_v0"])
def test_generated_train_and_test_puzzles_are_disjoint(name: str) -> None:
    train = {tuple(p.meta["grid"]) for p in ENVS[name].load_problems("generated", "train", 0, 200)}
    test = {tuple(p.meta["grid"]) for p in ENVS[name].load_problems("generated", "test", 0, 64)}
    assert len(test) > 16 and not train & test  # sokoban's small rooms repeated 29 of 500 before


def test_held_out_split_smaller_than_eval_problems_is_one_line(monkeypatch, capsys) -> None:
    code = run_cli(["validate", str(EXPERIMENTS / "code_multi.yaml"), "--set", "env.eval_problems=6"], monkeypatch)
    err = one_line_error(capsys, code)
    assert "generated: code_v0 has 5 held-out problems, fewer than the 6" in err


def test_every_example_experiment_has_the_held_out_problems_it_asks_for() -> None:
    import yaml

    for path in sorted(EXPERIMENTS.glob("*.yaml")):
        env = yaml.safe_load(path.read_text())["env"]
        test = ENVS[env["name"]].load_problems(env["data"], "test", 0, env["eval_problems"], env.get("options"))
        assert len(test) == env["eval_problems"], path.name


# --- validate opens the data; train checks it before the run directory and the models ---------------
def test_validate_opens_env_data(tmp_path: Path, monkeypatch, capsys) -> None:
    missing = tmp_path / "missing.jsonl"
    err = one_line_error(capsys, run_cli(["validate", str(SMOKE), "--set", f"env.data={missing}"], monkeypatch))
    assert str(missing) in err


def test_train_checks_data_before_the_run_directory_and_models(tmp_path: Path, monkeypatch, capsys) -> None:
    def no_models(*args: object, **kwargs: object) -> None:
        raise AssertionError("train loaded models before checking its data")

    monkeypatch.setattr("pettingllms_cli.training.loop.Team", no_models)
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"question": 1, "answer": "#### 1"}, {"question": "q", "answer": "#### 2"}])
    run = tmp_path / "run"
    code = run_cli(["train", str(SMOKE), "--out", str(run), "--set", f"env.data={bad}"], monkeypatch)
    assert "bad.jsonl: record 1" in one_line_error(capsys, code)
    assert not run.exists()  # so the corrected rerun is not refused with "already holds a run"


def test_train_wraps_an_unexpected_loader_error(tmp_path: Path, monkeypatch, capsys) -> None:
    def broken(*args: object, **kwargs: object) -> list:
        raise TypeError("'int' object is not iterable")

    monkeypatch.setattr(MathToolEnv, "load_problems", classmethod(broken))
    code = run_cli(["train", str(SMOKE), "--out", str(tmp_path / "run")], monkeypatch)
    assert "math_tool_v0 cannot read this data file (TypeError" in one_line_error(capsys, code)
    assert not (tmp_path / "run").exists()


# --- spec and model sources -------------------------------------------------------------------------
def test_group_size_is_bounded_at_validate(monkeypatch, capsys) -> None:
    err = one_line_error(capsys, run_cli(["validate", str(SMOKE), "--set", "algorithm.group_size=1000000"], monkeypatch))
    assert "algorithm.group_size" in err and "256" in err


def test_an_agent_name_with_a_trailing_newline_is_refused(tmp_path: Path, monkeypatch, capsys) -> None:
    import yaml

    tree = yaml.safe_load(SMOKE.read_text())
    tree["agents"] = {f"{name}\n" if i == 0 else name: agent for i, (name, agent) in enumerate(tree["agents"].items())}
    spec = tmp_path / "nl.yaml"
    spec.write_text(yaml.safe_dump(tree))
    err = one_line_error(capsys, run_cli(["validate", str(spec)], monkeypatch))
    assert "must be letters, digits and _" in err


def test_a_random_bytes_gguf_is_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    from pettingllms_cli.models.loader import resolve

    junk = tmp_path / "model.gguf"
    junk.write_bytes(bytes(range(256)) * 8)
    err = one_line_error(capsys, run_cli(["validate", str(SMOKE), "--set", f"models.tiny.source={junk}"], monkeypatch))
    assert "model.gguf is not a GGUF file" in err
    junk.write_bytes(b"GGUF\x03\x00\x00\x00" + bytes(range(16)))  # the magic, then garbage
    monkeypatch.setenv("PETTINGLLMS_CACHE", str(tmp_path / "cache"))
    with pytest.raises(UserError, match="cannot read it as a GGUF model"):
        resolve(str(junk))


def test_an_uncached_hub_id_fails_at_once(monkeypatch, capsys) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # online, an uncached id downloads (test_hub_models.py)
    began = time.monotonic()
    code = run_cli(["validate", str(SMOKE), "--set", "models.tiny.source=nobody-here/no-such-model"], monkeypatch)
    assert "not in the local Hugging Face cache" in one_line_error(capsys, code)
    assert time.monotonic() - began < 20  # no online retries (they took about 40 s)


@pytest.mark.parametrize("config", ["garbage{", '{"model_type": "nonsense"}'])
@pytest.mark.parametrize("quantization", ["none", "nf4"])
def test_a_model_folder_with_a_broken_config_is_one_line(
    tmp_path: Path, monkeypatch, capsys, config: str, quantization: str
) -> None:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(config)
    args = ["--set", f"models.tiny.source={tmp_path / 'model'}", "--set", f"models.tiny.quantization={quantization}"]
    err = one_line_error(capsys, run_cli(["validate", str(SMOKE), *args], monkeypatch))
    assert "config.json cannot be read" in err


def test_envs_check_wraps_an_unexpected_loader_error(tmp_path: Path, monkeypatch, capsys) -> None:
    def broken(*args: object, **kwargs: object) -> list:
        raise KeyError("grid")

    monkeypatch.setattr(ENVS["plan_path_v0"], "load_problems", classmethod(broken))
    err = one_line_error(capsys, run_cli(["envs", "check", "plan_path_v0"], monkeypatch))
    assert "plan_path_v0 cannot read this data file (KeyError" in err
