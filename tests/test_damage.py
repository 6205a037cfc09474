"""A damaged or edited run directory (issue 17): each case ends in one line or a clean fallback, never a traceback.

Cases from an outside pass: a spec that differs from the checkpoint's own, a truncated adapter file, a
failed `--resume --force` with another LoRA rank, a hand-edited spec.yaml, a full disk while the report
is written, a half line in metrics.jsonl, a damaged eval_before.json, the disk pre-check's size, SIGTERM
in the final held-out eval, paths read as rich markup and a renamed agent.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
import yaml
from rich.console import Console

from pettingllms_cli.errors import UserError
from pettingllms_cli.training.update_settings import optim_settings
from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "experiments" / "smoke.yaml"
SMALL = [
    "env.eval_problems=2",
    "train.problems_per_step=1",
    "algorithm.group_size=2",
    "train.max_new_tokens=4",
    "env.max_turns=1",
]

pytestmark = pytest.mark.usefixtures("one_thread")


def spec(*extra: str):
    from pettingllms_cli.spec import load_spec

    return load_spec(SMOKE, [*SMALL, *extra])


def train(run_dir: Path, *extra: str, resume: bool = False, force: bool = False, console: Console | None = None) -> Path:
    from pettingllms_cli.training.loop import train as run_training

    with mock.patch("pettingllms_cli.training.loop.write_report"):  # plots take seconds and are not under test here
        return run_training(spec(*extra), run_dir, resume=resume, force=force, console=console or Console(quiet=True))


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """The smoke spec, smaller, trained 2 steps with a checkpoint after each, report included."""
    from pettingllms_cli.training.loop import train as run_training

    run = tmp_path_factory.mktemp("damage") / "run"
    run_training(spec(), run, console=Console(quiet=True))
    assert (run / "checkpoints" / "step_2").is_dir() and (run / "plots" / "loss.png").is_file()
    return run


@pytest.fixture
def run_dir(trained: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(trained, copy)
    return copy


def steps_logged(run_dir: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error:"), err
    return err


# --- 3. the checkpoint's own spec ------------------------------------------------------------------
def test_resume_compares_the_spec_saved_in_the_checkpoint(run_dir: Path) -> None:
    # spec.yaml replaced (say by an --overwrite beside the run) with a spec at another learning rate.
    saved = yaml.safe_load((run_dir / "spec.yaml").read_text())
    saved["algorithm"]["lr"] = 0.02
    (run_dir / "spec.yaml").write_text(yaml.safe_dump(saved))
    with pytest.raises(UserError, match=r"step_2: trained with a different spec \(algorithm\.lr: 0\.01 -> 0\.02\)"):
        train(run_dir, "algorithm.lr=0.02", "train.steps=3", resume=True)
    assert steps_logged(run_dir) == [1, 2]


# --- 4. a truncated adapter file ---------------------------------------------------------------------
def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_resume_falls_back_past_a_truncated_adapter(run_dir: Path) -> None:
    truncate(run_dir / "checkpoints" / "step_2" / "caller" / "adapter_model.safetensors")
    out = Console(record=True, width=200)
    train(run_dir, "train.steps=3", resume=True, console=out)
    assert "skipped step_2: damaged adapter file caller/adapter_model.safetensors" in out.export_text()
    assert json.loads((run_dir / "resumes.jsonl").read_text())["from_step"] == 1
    assert steps_logged(run_dir) == [1, 2, 3]


def test_eval_refuses_a_truncated_adapter_in_one_line(run_dir: Path, monkeypatch, capsys) -> None:
    truncate(run_dir / "checkpoints" / "step_2" / "verifier" / "adapter_model.safetensors")
    capsys.readouterr()
    assert run_cli(["eval", str(run_dir)], monkeypatch) == 2
    assert "damaged adapter file verifier/adapter_model.safetensors" in one_error_line(capsys)


# --- 5. a failed --resume --force, a hand-edited spec.yaml -----------------------------------------------
def test_failed_force_resume_with_another_lora_rank_leaves_the_run_as_it_was(run_dir: Path, monkeypatch) -> None:
    before = (run_dir / "spec.yaml").read_bytes()
    with pytest.raises(UserError, match=r"step_2/caller: the saved adapter does not fit agent 'caller'"):
        train(run_dir, "agents.caller.lora.r=8", "train.steps=3", resume=True, force=True)
    assert (run_dir / "spec.yaml").read_bytes() == before, "spec.yaml must change only once the checkpoint loaded"
    assert run_cli(["eval", str(run_dir), "--episodes", "1"], monkeypatch) == 0
    train(run_dir, "train.steps=3", resume=True)  # a plain resume still works
    assert steps_logged(run_dir) == [1, 2, 3]


def test_eval_refuses_a_hand_edited_spec_yaml_in_one_line(run_dir: Path, monkeypatch, capsys) -> None:
    saved = yaml.safe_load((run_dir / "spec.yaml").read_text())
    saved["agents"]["caller"]["lora"]["r"] = 8
    (run_dir / "spec.yaml").write_text(yaml.safe_dump(saved))
    capsys.readouterr()
    assert run_cli(["eval", str(run_dir)], monkeypatch) == 2
    assert "spec.yaml differs from the spec this checkpoint was trained with (agents.caller.lora.r: 4 -> 8)" in one_error_line(
        capsys
    )


# --- 6. a full disk while the report is written -------------------------------------------------------
def test_report_on_a_full_disk_is_one_line_and_leaves_no_cut_png(run_dir: Path) -> None:
    pngs = {p.name: p.read_bytes() for p in (run_dir / "plots").glob("*.png")}
    assert pngs

    def small_files() -> None:  # a write past 8 KiB fails with EFBIG, as one past a full disk does with ENOSPC
        resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))

    done = subprocess.run(
        [sys.executable, "-m", "pettingllms_cli", "report", str(run_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        preexec_fn=small_files,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    err = done.stderr.strip()
    assert len(err.splitlines()) == 1 and "cannot write the report" in err and f"pettingllms report {run_dir}" in err, err
    assert {p.name: p.read_bytes() for p in (run_dir / "plots").glob("*.png")} == pngs, "a PNG was cut or emptied"
    assert not [p for p in run_dir.rglob(".*tmp-*")], "temporary files left behind"


# --- 7. damaged JSON -----------------------------------------------------------------------------------------
def test_half_metrics_line_and_damaged_eval_before_break_neither_report_nor_resume(run_dir: Path, monkeypatch) -> None:
    with (run_dir / "metrics.jsonl").open("a") as f:
        f.write('{"step": 3, "team_success_rate": 0.')  # a crash mid-write
    (run_dir / "eval_before.json").write_text('{"team_success_rate": 0.5, "episo')
    assert run_cli(["report", str(run_dir)], monkeypatch) == 0
    assert "| 2 |" in (run_dir / "report.md").read_text()

    train(run_dir, "train.steps=3", resume=True)
    assert steps_logged(run_dir) == [1, 2, 3]
    assert json.loads((run_dir / "eval_before.json").read_text())["episodes"] == 2, "the damaged file is scored again"
    assert (run_dir / "eval_after.json").is_file()


# --- 10. the disk pre-check ---------------------------------------------------------------------------------
def on_disk(folder: Path) -> int:
    return sum(-(-f.stat().st_size // 4096) * 4096 for f in folder.rglob("*") if f.is_file())


def test_disk_check_measures_a_real_checkpoint(trained: Path, tmp_path: Path) -> None:
    from pettingllms_cli.algorithms.optim import make_optimizers
    from pettingllms_cli.policy.adapters import Team
    from pettingllms_cli.training.checkpoint import measure_checkpoint

    real = on_disk(trained / "checkpoints" / "step_2")
    team = Team(spec())
    measured = measure_checkpoint(team, make_optimizers(team, optim_settings(team.spec)), tmp_path)
    assert 0.9 * real <= measured <= 1.1 * real, (measured, real)
    assert not (tmp_path / "checkpoints").exists() or not any((tmp_path / "checkpoints").iterdir())


def test_disk_check_counts_only_the_checkpoints_still_to_write(trained: Path, run_dir: Path, tmp_path: Path) -> None:
    per_checkpoint = on_disk(trained / "checkpoints" / "step_2")
    room = mock.Mock(free=int(1.5 * per_checkpoint) + 2**20)  # one more checkpoint fits, two do not
    with mock.patch("pettingllms_cli.training.checkpoint.shutil.disk_usage", return_value=room):
        train(run_dir, "train.steps=3", resume=True)  # 1 checkpoint to go: fits
        with pytest.raises(UserError, match=r"MiB free, but 2 checkpoint\(s\)"):
            train(tmp_path / "fresh")  # 2 checkpoints: do not
    assert steps_logged(run_dir) == [1, 2, 3]


# --- 11. SIGTERM in the final held-out eval ----------------------------------------------------------------------
SIGTERM_IN_FINISH = """
import os, signal, sys
import pettingllms_cli.training.loop as t
real_finish = t.finish
def finish(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)  # as a scheduler's stop arrives once training is done
    return real_finish(*args, **kwargs)
t.finish = finish
sys.argv = ["pettingllms", *sys.argv[1:]]
from pettingllms_cli.cli import main
main()
"""


def test_sigterm_in_the_final_eval_says_how_to_finish(tmp_path: Path, monkeypatch) -> None:
    run_dir = tmp_path / "run"
    args = ["train", str(SMOKE), "--out", str(run_dir), *[a for s in SMALL for a in ("--set", s)]]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", SIGTERM_IN_FINISH, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"{done.returncode}: {done.stderr}"
    assert "SIGTERM: stopped during the final held-out eval" in done.stdout and "--resume" in done.stdout
    assert (run_dir / "checkpoints" / "step_2").is_dir() and not (run_dir / "eval_after.json").exists()
    with mock.patch("pettingllms_cli.training.loop.write_report"):
        assert run_cli([*args, "--resume"], monkeypatch) == 0
    assert (run_dir / "eval_after.json").is_file() and steps_logged(run_dir) == [1, 2]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


# --- 12. markup in paths, renamed agents ------------------------------------------------------------------------
def test_paths_with_brackets_print_as_they_are(trained: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    folder = tmp_path / "exp[x]"
    folder.mkdir()
    shutil.copy(SMOKE, folder / "smoke.yaml")
    assert run_cli(["validate", str(folder / "smoke.yaml")], monkeypatch) == 0
    assert f"{folder}/smoke.yaml: ok" in capsys.readouterr().out
    run = tmp_path / "run[x]"
    shutil.copytree(trained, run)
    assert run_cli(["report", str(run)], monkeypatch) == 0
    assert f"wrote {run}/report.md" in capsys.readouterr().out


def rename_caller(run_dir: Path) -> None:
    saved = yaml.safe_load((run_dir / "spec.yaml").read_text())
    saved["agents"]["talker"] = saved["agents"].pop("caller")
    (run_dir / "spec.yaml").write_text(yaml.safe_dump(saved))


def test_a_renamed_agent_is_named_as_such(run_dir: Path, monkeypatch, capsys) -> None:
    rename_caller(run_dir)
    capsys.readouterr()
    assert run_cli(["eval", str(run_dir)], monkeypatch) == 2
    err = one_error_line(capsys)
    assert "agent names differ: the checkpoint holds caller, verifier, the spec names talker, verifier" in err
    assert "partial" not in err
    # --resume --force with the renamed agent: refused, instead of a silent fresh start from step 0
    from pettingllms_cli.spec import load_spec
    from pettingllms_cli.training.loop import train as run_training

    with pytest.raises(UserError, match="agent names differ"):
        run_training(load_spec(run_dir / "spec.yaml"), run_dir, resume=True, force=True, console=Console(quiet=True))
    assert steps_logged(run_dir) == [1, 2]
