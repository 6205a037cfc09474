"""`pettingllms eval` on a trained smoke run, its checkpoint and its spec, plus the inputs it refuses."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """The smoke experiment trained for its 2 steps (lr 1e-2, so the adapters move)."""
    from rich.console import Console

    from pettingllms_cli.spec import load_spec
    from pettingllms_cli.training.loop import train

    run = tmp_path_factory.mktemp("eval") / "run"
    # The smoke spec, smaller: fewer problems and tokens keep every eval in this file to seconds.
    small = ["env.eval_problems=2", "train.problems_per_step=1", "algorithm.group_size=2", "train.max_new_tokens=4"]
    train(load_spec(ROOT / "experiments" / "smoke.yaml", small), run, console=Console(quiet=True))
    return run


def eval_json(args: list[str], out: Path, monkeypatch) -> dict:
    assert run_cli(["eval", *args, "--out", str(out)], monkeypatch) == 0
    return json.loads(out.read_text())


def test_checkpoint_eval_reproduces_the_runs_own_final_eval(run_dir, tmp_path, monkeypatch):
    result = eval_json([str(run_dir / "checkpoints" / "step_2")], tmp_path / "ckpt.json", monkeypatch)
    after = json.loads((run_dir / "eval_after.json").read_text())
    assert result["kind"] == "checkpoint" and result["step"] == 2 and result["decoding"] == "greedy"
    # Same problems (spec seed), same adapters, greedy: exactly what train scored at its end.
    for key in ("team_success_rate", "mean_attempts_to_success", "episodes", "tokens_generated"):
        assert result[key] == after[key], key
    lo, hi = result["team_success_ci"]
    assert 0.0 <= lo <= result["team_success_rate"] <= hi <= 1.0
    assert {"reward/caller", "reward/verifier", "tool_call_validity/tool_caller", "mean_turns", "seconds"} <= set(result)
    assert "tool_call_validity/verifier" not in result  # the verifier never calls a tool
    assert len(result["per_episode"]) == result["episodes"] == 2


def test_run_and_its_spec_differ_once_the_adapters_changed(run_dir, tmp_path, monkeypatch):
    trained = eval_json([str(run_dir)], tmp_path / "run.json", monkeypatch)
    base = eval_json([str(run_dir / "spec.yaml")], tmp_path / "spec.json", monkeypatch)
    before = json.loads((run_dir / "eval_before.json").read_text())
    after = json.loads((run_dir / "eval_after.json").read_text())
    assert (trained["kind"], base["kind"], trained["step"], base["step"]) == ("run", "spec", 2, 0)
    assert [e["id"] for e in trained["per_episode"]] == [e["id"] for e in base["per_episode"]]  # same problems
    for agent in ("caller", "verifier"):
        key = f"action_logprob/{agent}"
        # Control: each policy reproduces the number train computed for it, so a difference is the adapters'.
        assert base[key] == pytest.approx(before[key], abs=1e-5)
        assert trained[key] == pytest.approx(after[key], abs=1e-5)
        assert abs(trained[key] - base[key]) > 1e-4, key  # 2 steps at lr 1e-2 moved each agent's policy


def test_data_file_and_episodes(run_dir, tmp_path, monkeypatch):
    data = tmp_path / "gsm8k.jsonl"
    records = [
        {"question": f"Ann has {i} pens and buys 2 more. How many pens?", "answer": f"{i}+2\n#### {i + 2}"} for i in range(10)
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    result = eval_json([str(run_dir / "spec.yaml"), "--data", str(data), "--episodes", "2"], tmp_path / "d.json", monkeypatch)
    assert result["episodes"] == 2 and result["data"] == str(data)
    assert all(e["id"].startswith("gsm8k-") for e in result["per_episode"])


def partial_run(run_dir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "partial"
    shutil.copytree(run_dir, copy)
    (copy / "checkpoints" / "step_2" / "verifier" / "adapter_model.safetensors").unlink()
    return copy


def only_tmp_checkpoint(run_dir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "interrupted"
    copy.mkdir()
    shutil.copy(run_dir / "spec.yaml", copy / "spec.yaml")
    shutil.copytree(run_dir / "checkpoints" / "step_1", copy / "checkpoints" / "step_1.tmp-123")
    return copy


def bad_data(run_dir: Path, tmp_path: Path) -> list[str]:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "no answer"}\n')
    return [str(run_dir), "--data", str(bad)]


@pytest.mark.parametrize(
    ("make_args", "message"),
    [
        (lambda run, tmp: [str(tmp)], "not a run directory"),
        (lambda run, tmp: [str(tmp / "missing")], "no such file or directory"),
        (lambda run, tmp: [str(partial_run(run, tmp))], "partial checkpoint"),
        (lambda run, tmp: [str(partial_run(run, tmp) / "checkpoints" / "step_2")], "partial checkpoint"),
        (lambda run, tmp: [str(only_tmp_checkpoint(run, tmp))], "no complete checkpoint"),
        (lambda run, tmp: [str(only_tmp_checkpoint(run, tmp) / "checkpoints" / "step_1.tmp-123")], "partial checkpoint"),
        (bad_data, "bad.jsonl: record 1"),
        (lambda run, tmp: [str(run), "--data", str(tmp / "nope.jsonl")], "data file not found"),
        (lambda run, tmp: [str(run), "--split", "validation"], "--split"),
        (lambda run, tmp: [str(run), "--temperature", "0"], "--temperature"),
    ],
)
def test_bad_inputs_exit_2_with_one_line(run_dir, tmp_path, monkeypatch, capsys, make_args, message):
    args = make_args(run_dir, tmp_path)
    capsys.readouterr()
    assert run_cli(["eval", *args], monkeypatch) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def test_spec_of_a_run_is_untouched_by_eval(run_dir):
    # eval reads run directories; it must never rewrite them (compare relies on spec.yaml equality).
    assert yaml.safe_load((run_dir / "spec.yaml").read_text())["name"] == "smoke"
