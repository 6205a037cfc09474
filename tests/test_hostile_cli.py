"""A hostile pass over the CLI (issues 25 item 6 and 26): what a careless or unlucky user types must never delete
their files, hang, or end in a traceback.

Each case is bad input or bad luck: it ends in exit 2 with one line naming the field, file or flag (or a clean
fallback), and no file of the user's is touched. The cases: run directories pointing at user folders, files and
symlinks; `--out ''`; a full disk and kills at several moments of a checkpoint write, then `--resume`; damaged
trainer state; `--set` with odd values; YAML bombs, deep nesting and duplicate keys; damaged metrics in `report`;
huge, non-finite and out-of-range numbers on the command line; and `compare` stopped by SIGTERM.
"""

from __future__ import annotations

import errno
import fcntl
import io
import json
import os
import shutil
import signal
import time
from pathlib import Path
from unittest import mock

import pytest
import torch
import yaml
from rich.console import Console

from pettingllms_cli.errors import UserError
from tests.conftest import FAST, run_cli

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "experiments" / "smoke.yaml"
CKPT = ["train.checkpoint_every=1"]

pytestmark = pytest.mark.usefixtures("one_thread")


def one_error_line(capsys, *named: str) -> str:
    """stderr is exactly one `error:` line (no traceback) that names every string in `named`."""
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error:"), err
    for name in named:
        assert name in err, err
    return err


def tree_of(folder: Path) -> dict[str, bytes | str]:
    """Every path under `folder` with its bytes (files) or link target: equal trees mean nothing was touched."""
    found: dict[str, bytes | str] = {}
    for path in sorted(folder.rglob("*")):
        key = str(path.relative_to(folder))
        found[key] = f"-> {os.readlink(path)}" if path.is_symlink() else (path.read_bytes() if path.is_file() else "dir")
    return found


def user_folder(path: Path) -> Path:
    """A folder of someone's own files: what `--out ~/Documents` points at."""
    path.mkdir(parents=True)
    (path / "notes.txt").write_text("my notes\n")
    (path / "thesis").mkdir()
    (path / "thesis" / "draft.tex").write_text("\\section{}\n")
    return path


def train_cli(out: str, *flags: str) -> list[str]:
    return ["train", str(SMOKE), "--out", out, *[a for s in FAST for a in ("--set", s)], *flags]


# --- 1. only a run is ever deleted -------------------------------------------------------------------
def test_overwrite_refuses_a_folder_of_user_files(tmp_path: Path, monkeypatch, capsys) -> None:
    docs = user_folder(tmp_path / "Documents")
    before = tree_of(docs)
    assert run_cli(train_cli(str(docs), "--overwrite"), monkeypatch) == 2
    one_error_line(capsys, str(docs), "notes.txt", "not a run")
    assert tree_of(docs) == before and (docs / "notes.txt").read_text() == "my notes\n"


def test_overwrite_through_a_symlink_leaves_its_target_alone(tmp_path: Path, monkeypatch, capsys) -> None:
    docs = user_folder(tmp_path / "Documents")
    link = tmp_path / "L"
    link.symlink_to(docs)
    before = tree_of(docs)
    assert run_cli(train_cli(str(link), "--overwrite"), monkeypatch) == 2
    one_error_line(capsys, "notes.txt")
    assert tree_of(docs) == before and link.is_symlink()


def test_overwrite_of_a_run_never_deletes_outside_it(tmp_path: Path) -> None:
    """A run whose entries are links to elsewhere: the links go, their targets stay."""
    from pettingllms_cli.spec import load_spec
    from pettingllms_cli.training.rundir import prepare_run_dir

    outside = user_folder(tmp_path / "outside")
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "spec.yaml").write_text("name: old\n")
    (run / "metrics.jsonl").write_text("")
    (run / "plots").symlink_to(outside)
    (run / "report.md").symlink_to(outside / "notes.txt")
    before = tree_of(outside)
    prepare_run_dir(load_spec(SMOKE, FAST), run, resume=False, overwrite=True, force=False)
    assert tree_of(outside) == before
    assert sorted(p.name for p in run.iterdir()) == ["checkpoints", "spec.yaml"]
    assert "name: smoke" in (run / "spec.yaml").read_text()


def test_overwrite_replaces_a_run(tmp_path: Path) -> None:
    from pettingllms_cli.spec import load_spec
    from pettingllms_cli.training.rundir import prepare_run_dir

    run = tmp_path / "run"
    (run / "checkpoints" / "step_1" / "caller").mkdir(parents=True)
    (run / "spec.yaml").write_text("name: old\n")
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    (run / "report.md").write_text("# old\n")
    prepare_run_dir(load_spec(SMOKE, FAST), run, resume=False, overwrite=True, force=False)
    assert sorted(p.name for p in run.iterdir()) == ["checkpoints", "spec.yaml"]
    assert not any((run / "checkpoints").iterdir())


def test_a_run_holding_a_users_file_is_not_overwritten(tmp_path: Path, monkeypatch, capsys) -> None:
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "spec.yaml").write_text("name: old\n")
    (run / "my_analysis.ipynb").write_text("{}")
    assert run_cli(train_cli(str(run), "--overwrite"), monkeypatch) == 2
    one_error_line(capsys, "my_analysis.ipynb")
    assert (run / "my_analysis.ipynb").is_file() and (run / "spec.yaml").read_text() == "name: old\n"


def test_empty_out_is_a_usage_error(tmp_path: Path, monkeypatch, capsys) -> None:
    here = user_folder(tmp_path / "cwd")
    monkeypatch.chdir(here)
    before = tree_of(here)
    assert run_cli(train_cli("", "--overwrite"), monkeypatch) == 2
    one_error_line(capsys, "--out")
    assert tree_of(here) == before


@pytest.mark.parametrize("command", ["eval", "compare"])
def test_empty_out_is_refused_by_eval_and_compare(command: str, tmp_path: Path, monkeypatch, capsys) -> None:
    args = ["eval", str(SMOKE), "--out", ""] if command == "eval" else ["compare", str(SMOKE), str(SMOKE), "--out", "  "]
    assert run_cli(args, monkeypatch) == 2
    one_error_line(capsys, "--out")


def test_out_naming_a_file_leaves_it_alone(tmp_path: Path, monkeypatch, capsys) -> None:
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    assert run_cli(train_cli(str(target), "--overwrite"), monkeypatch) == 2
    one_error_line(capsys, "precious.txt")
    assert target.read_text() == "keep me\n"


def test_compare_never_replaces_a_folder_of_user_files(tmp_path: Path, monkeypatch, capsys) -> None:
    """compare's `<out>/<name>/seed0` already holds someone's files: refused, not trained over."""
    out = tmp_path / "out"
    docs = user_folder(out / "smoke" / "seed0")
    before = tree_of(docs)
    solo = tmp_path / "solo.yaml"
    tree = yaml.safe_load(SMOKE.read_text())
    tree["name"] = "solo"
    solo.write_text(yaml.safe_dump(tree))
    args = ["compare", str(SMOKE), str(solo), "--seeds", "1", "--max-steps", "1", "--out", str(out)]
    assert run_cli(args, monkeypatch) == 2
    one_error_line(capsys, "notes.txt")
    assert tree_of(docs) == before


def test_compare_counts_a_folder_of_user_files_as_foreign(tmp_path: Path) -> None:
    from pettingllms_cli.spec import load_spec
    from pettingllms_cli.training.compare import run_state

    docs = user_folder(tmp_path / "seed0")
    assert run_state(load_spec(SMOKE, FAST), docs) == "foreign"
    assert run_state(load_spec(SMOKE, FAST), tmp_path / "nothing") == "new"


# --- 3. bounds and finite numbers ----------------------------------------------------------------------
def write_spec(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    return path


def smoke_with(tmp_path: Path, **sections: dict) -> Path:
    tree = yaml.safe_load(SMOKE.read_text())
    for section, values in sections.items():
        tree[section] = {**tree.get(section, {}), **values} if isinstance(tree.get(section), dict) else values
    return write_spec(tmp_path, yaml.safe_dump(tree))


@pytest.mark.parametrize(
    ("section", "values", "field"),
    [
        ("algorithm", {"lr": float("inf")}, "algorithm.lr"),
        ("algorithm", {"kl_coef": float("inf")}, "algorithm.kl_coef"),
        ("reward", {"team_weight": float("inf")}, "reward.team_weight"),
        ("reward", {"local_weight": float("nan")}, "reward.local_weight"),
        ("env", {"options": {"format_bonus": float("nan")}}, "env.options.format_bonus"),
        ("train", {"temperature": float("-inf")}, "train.temperature"),
        ("vllm", {"cpu_kv_cache_gib": float("inf")}, "vllm.cpu_kv_cache_gib"),
    ],
)
def test_non_finite_numbers_are_refused_naming_the_field(tmp_path, monkeypatch, capsys, section, values, field) -> None:
    path = smoke_with(tmp_path, **{section: values})
    assert run_cli(["validate", str(path)], monkeypatch) == 2
    one_error_line(capsys, field, "finite")


def test_lr_inf_and_format_bonus_nan_as_typed_in_yaml(tmp_path, monkeypatch, capsys) -> None:
    text = SMOKE.read_text().replace("lr: 1.0e-2", "lr: .inf")
    assert run_cli(["validate", str(write_spec(tmp_path, text))], monkeypatch) == 2
    one_error_line(capsys, "algorithm.lr")
    text = SMOKE.read_text().replace("format_bonus: 0.2", "format_bonus: .nan")
    assert run_cli(["validate", str(write_spec(tmp_path, text))], monkeypatch) == 2
    one_error_line(capsys, "format_bonus")


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("train.steps=true", "train.steps"),
        ("train.problems_per_step=false", "train.problems_per_step"),
        ("env.eval_problems=true", "env.eval_problems"),
        ("algorithm.group_size=true", "algorithm.group_size"),
        ("train.steps=-3", "train.steps"),
        ("train.steps=1e400", "train.steps"),
        ("train.steps=99999999999999999999999", "train.steps"),
        ("env.eval_problems=1000000000", "env.eval_problems"),
        ("train.problems_per_step=1000000000", "train.problems_per_step"),
        ("train.eval_subset=1000000000", "train.eval_subset"),
        ("train.checkpoint_every=99999999999999999999", "train.checkpoint_every"),
        ("algorithm.lr=.nan", "algorithm.lr"),
        ("algorithm.lr=-.inf", "algorithm.lr"),
        ("reward.team_weight=.inf", "reward.team_weight"),
        ("seed=18446744073709551617", "seed"),
        ("seed=-1", "seed"),
    ],
)
def test_odd_set_values_are_refused_naming_the_field(monkeypatch, capsys, override: str, field: str) -> None:
    assert run_cli(["validate", str(SMOKE), "--set", override], monkeypatch) == 2
    one_error_line(capsys, field)


def test_bounds_are_documented_in_the_schema() -> None:
    from pettingllms_cli.spec import Experiment

    fields = {
        "env.eval_problems": Experiment.model_fields["env"].annotation.model_fields["eval_problems"],
        "train.problems_per_step": Experiment.model_fields["train"].annotation.model_fields["problems_per_step"],
        "train.steps": Experiment.model_fields["train"].annotation.model_fields["steps"],
    }
    for name, info in fields.items():
        upper = next((m.le for m in info.metadata if getattr(m, "le", None) is not None), None)
        assert upper is not None, f"{name} has no upper bound"
        assert f"{upper:,}" in info.description or str(upper) in info.description, f"{name}: bound {upper} undocumented"


def test_steps_twice_names_the_key_and_both_lines(tmp_path, monkeypatch, capsys) -> None:
    text = SMOKE.read_text().replace("train: {steps: 2,", "train: {steps: 2, steps: 5,")
    assert run_cli(["validate", str(write_spec(tmp_path, text))], monkeypatch) == 2
    one_error_line(capsys, "steps")
    text = "name: a\nseed: 1\nenv: {name: math_tool_v0}\nseed: 2\n"
    assert run_cli(["validate", str(write_spec(tmp_path, text))], monkeypatch) == 2
    err = one_error_line(capsys, "'seed'", "line 2", "line 4")
    assert "exp.yaml" in err


def test_duplicate_key_in_a_set_value_is_refused(monkeypatch, capsys) -> None:
    assert run_cli(["validate", str(SMOKE), "--set", "env.options={format_bonus: 0.1, format_bonus: 0.3}"], monkeypatch) == 2
    one_error_line(capsys, "format_bonus")


def test_yaml_merge_keys_are_not_duplicates(tmp_path: Path) -> None:
    """`<<: *defaults` then a key of its own is YAML's override, not a duplicate."""
    from pettingllms_cli.spec.experiment import read_yaml

    path = write_spec(tmp_path, "defaults: &d {steps: 2, problems_per_step: 1}\ntrain: {<<: *d, steps: 3}\n")
    assert read_yaml(path)["train"] == {"steps": 3, "problems_per_step": 1}


def test_deeply_nested_yaml_is_one_line(tmp_path, monkeypatch, capsys) -> None:
    deep = "name: a\nenv: {name: math_tool_v0, options: " + "[" * 20000 + "]" * 20000 + "}\n"
    assert run_cli(["validate", str(write_spec(tmp_path, deep))], monkeypatch) == 2
    one_error_line(capsys, "exp.yaml", "nest")


def test_a_yaml_bomb_is_refused_quickly(tmp_path, monkeypatch, capsys) -> None:
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]  # 10^9 strings once expanded
    text = SMOKE.read_text().replace("options: {format_bonus: 0.2}", "options: {format_bonus: 0.2, bomb: *a8}")
    started = time.monotonic()
    assert run_cli(["validate", str(write_spec(tmp_path, "\n".join(lines) + "\n" + text))], monkeypatch) == 2
    assert time.monotonic() - started < 10
    one_error_line(capsys, "exp.yaml")


def test_eval_episodes_beyond_the_bound_exits_2_before_any_model_loads(monkeypatch, capsys) -> None:
    with mock.patch("pettingllms_cli.policy.adapters.Team", side_effect=AssertionError("a model loaded")):
        assert run_cli(["eval", str(SMOKE), "--episodes", "1000000000"], monkeypatch) == 2
    assert "--episodes" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--temperature", "nan"], "--temperature"),
        (["--temperature", "inf"], "--temperature"),
        (["--temperature", "-1"], "--temperature"),
        (["--seed", str(2**70)], "--seed"),
        (["--seed", "-1"], "--seed"),
    ],
)
def test_eval_flags_are_finite_and_bounded_before_any_model_loads(monkeypatch, capsys, flags, named) -> None:
    with mock.patch("pettingllms_cli.policy.adapters.Team", side_effect=AssertionError("a model loaded")):
        assert run_cli(["eval", str(SMOKE), *flags], monkeypatch) == 2
    assert named in capsys.readouterr().err


# --- 4 and 5. damaged state: one line or a fallback ----------------------------------------------------------
def train(run_dir: Path, *extra: str, resume: bool = False, force: bool = False, console: Console | None = None) -> Path:
    from pettingllms_cli.spec import load_spec
    from pettingllms_cli.training.loop import train as run_training

    spec = load_spec(SMOKE, [*FAST, *CKPT, *extra])
    with mock.patch("pettingllms_cli.training.loop.write_report"):  # plots take seconds and are not under test here
        return run_training(spec, run_dir, resume=resume, force=force, console=console or Console(quiet=True))


def steps_logged(run_dir: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """The smoke spec at its smallest, 2 steps with a checkpoint after each."""
    run = tmp_path_factory.mktemp("hostile") / "run"
    train(run, "train.steps=2")
    assert (run / "checkpoints" / "step_2" / "trainer_state.pt").is_file()
    return run


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The same run trained 3 steps without a stop: what every interrupted-and-resumed run must end as."""
    run = tmp_path_factory.mktemp("hostile_ref") / "run"
    train(run, "train.steps=3")
    return run


@pytest.fixture
def run_dir(trained: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(trained, tmp_path / "run", symlinks=True))


def metrics_without_clock(run_dir: Path) -> list[dict]:
    from pettingllms_cli.training.loop import WALL_CLOCK_KEYS

    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in WALL_CLOCK_KEYS} for r in rows]


DAMAGED_STATES = {
    "a list": [],
    "an empty dict": {},
    "rng a string": "rng",
    "optimizers a list": "optimizers",
    "step a string": "step",
    "roles a list": "roles",
    "skip counters a list": "skipped_in_a_row",
    "data a list": "data",
}


def damage_state(folder: Path, how: str) -> None:
    value = DAMAGED_STATES[how]
    if isinstance(value, str):
        state = torch.load(folder / "trainer_state.pt", weights_only=True)
        state[value] = "x" if value in ("rng", "step") else []
        value = state
    torch.save(value, folder / "trainer_state.pt")


@pytest.mark.parametrize("how", list(DAMAGED_STATES))
def test_damaged_trainer_state_falls_back_to_the_previous_checkpoint(run_dir: Path, how: str) -> None:
    damage_state(run_dir / "checkpoints" / "step_2", how)
    out = Console(record=True, width=300, file=io.StringIO())
    train(run_dir, "train.steps=3", resume=True, console=out)
    assert steps_logged(run_dir) == [1, 2, 3]
    said = out.export_text()
    assert "skipped step_2" in said and "from step_1" in said


@pytest.mark.parametrize("how", ["a list", "an empty dict", "rng a string"])
def test_every_trainer_state_damaged_is_one_line_not_a_restart(run_dir: Path, how: str, monkeypatch, capsys) -> None:
    for step in (1, 2):
        damage_state(run_dir / "checkpoints" / f"step_{step}", how)
    args = [*train_cli(str(run_dir), "--resume"), "--set", "train.checkpoint_every=1", "--max-steps", "3"]
    assert run_cli(args, monkeypatch) == 2
    one_error_line(capsys, "trainer_state.pt", "step_2")
    assert steps_logged(run_dir) == [1, 2], "the run must not restart from step 0"


def test_damaged_state_is_one_line_in_eval(run_dir: Path, monkeypatch, capsys) -> None:
    damage_state(run_dir / "checkpoints" / "step_2", "a list")
    assert run_cli(["eval", str(run_dir / "checkpoints" / "step_2"), "--episodes", "1"], monkeypatch) == 2
    one_error_line(capsys, "trainer_state.pt")


def test_resume_with_no_usable_checkpoint_says_why_instead_of_restarting(run_dir: Path, monkeypatch, capsys) -> None:
    for step in (1, 2):
        shutil.rmtree(run_dir / "checkpoints" / f"step_{step}" / "verifier")
    args = [*train_cli(str(run_dir), "--resume"), "--set", "train.checkpoint_every=1", "--max-steps", "3"]
    assert run_cli(args, monkeypatch) == 2
    one_error_line(capsys, "verifier", "step_1", "step_2")
    assert steps_logged(run_dir) == [1, 2]


def test_forced_resume_that_drops_an_agent_is_one_line(run_dir: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    tree = yaml.safe_load(SMOKE.read_text())
    tree["env"]["layout"] = "single"
    tree["agents"] = {"caller": {"model": "tiny", "roles": ["solver"], "lora": {"r": 4, "alpha": 8}}}
    spec = write_spec(tmp_path, yaml.safe_dump(tree))
    args = ["train", str(spec), "--out", str(run_dir), *[a for s in [*FAST, *CKPT] for a in ("--set", s)]]
    code = run_cli([*args, "--max-steps", "3", "--resume", "--force"], monkeypatch)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if code == 2:  # refused: one line, the run as it was
        assert len(err.strip().splitlines()) == 1 and err.startswith("error:"), err
        assert steps_logged(run_dir) == [1, 2]
    else:  # continued: the kept agent's adapter carried on
        assert code == 0 and steps_logged(run_dir) == [1, 2, 3]


# --- kills and a full disk during a checkpoint write --------------------------------------------------------
class Killed(BaseException):
    """Stands in for SIGKILL: no `except Exception` or `finally` cleanup of the code under test may catch it."""


def kill_at(moment: str):
    """A patch that 'kills' the process at `moment` of the step-3 checkpoint write, leaving what a kill leaves."""
    real_save, real_replace, real_copytree = torch.save, os.replace, shutil.copytree

    def save(obj, path, *a, **k):
        if moment == "state half written" and Path(path).name == "trainer_state.pt" and obj.get("step") == 3:
            real_save(obj, path, *a, **k)
            data = Path(path).read_bytes()
            Path(path).write_bytes(data[: len(data) // 2])
            raise Killed
        return real_save(obj, path, *a, **k)

    def replace(src, dst, *a, **k):
        if moment == "before the rename" and Path(dst).name == "step_3":
            raise Killed
        real_replace(src, dst, *a, **k)
        if moment == "after the rename" and Path(dst).name == "step_3":
            raise Killed

    def copytree(src, dst, *a, **k):
        result = real_copytree(src, dst, *a, **k)
        if moment == "one adapter written" and ".tmp-" in str(dst) and Path(dst).name == "caller":
            raise Killed
        return result

    return save, replace, copytree


MOMENTS = ["one adapter written", "state half written", "before the rename", "after the rename"]


@pytest.mark.parametrize("moment", MOMENTS)
def test_a_kill_during_a_checkpoint_write_then_resume_ends_as_an_uninterrupted_run(
    run_dir: Path, reference: Path, moment: str
) -> None:
    import pettingllms_cli.training.checkpoint as ckpt

    save, replace, copytree = kill_at(moment)
    with (
        mock.patch.object(ckpt.torch, "save", save),
        mock.patch.object(ckpt.os, "replace", replace),
        mock.patch.object(ckpt.shutil, "copytree", copytree),
        pytest.raises(Killed),
    ):
        train(run_dir, "train.steps=3", resume=True)
    from pettingllms_cli.training import lock

    lock._held.clear()  # the 'killed' process's lock: the kernel would have released it
    train(run_dir, "train.steps=3", resume=True)
    assert metrics_without_clock(run_dir) == metrics_without_clock(reference)
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step_1", "step_2", "step_3"]
    for agent in ("caller", "verifier"):
        got = (run_dir / "checkpoints" / "step_3" / agent / "adapter_model.safetensors").read_bytes()
        assert got == (reference / "checkpoints" / "step_3" / agent / "adapter_model.safetensors").read_bytes()


def test_a_full_disk_during_a_checkpoint_keeps_the_previous_one_and_resumes(run_dir: Path, reference: Path) -> None:
    import pettingllms_cli.training.checkpoint as ckpt

    real_save = torch.save

    def full(obj, path, *a, **k):
        if isinstance(obj, dict) and obj.get("step") == 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_save(obj, path, *a, **k)

    with mock.patch.object(ckpt.torch, "save", full), pytest.raises(UserError, match="No space left.*step_2 is intact"):
        train(run_dir, "train.steps=3", resume=True)
    assert not [p for p in (run_dir / "checkpoints").iterdir() if ".tmp-" in p.name]
    train(run_dir, "train.steps=3", resume=True)
    assert metrics_without_clock(run_dir) == metrics_without_clock(reference)


# --- report on damaged metrics, and its writes under the run's lock ----------------------------------------
@pytest.mark.parametrize(
    "damage",
    [
        {"team_success_rate": "NaN"},
        {"seconds": None, "tokens_per_second": None},
        {"seconds": {"a": 1}, "reward/caller": {"x": 1}},
        {"tokens_per_second": "fast", "loss/caller": "NaN", "reward/verifier": [1, 2]},
        {"step": "2"},
    ],
)
def test_report_on_damaged_metrics_is_written_or_one_line(run_dir: Path, monkeypatch, capsys, damage: dict) -> None:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rows[-1] |= damage
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    code = run_cli(["report", str(run_dir)], monkeypatch)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert code == 0 and (run_dir / "report.md").is_file(), err


def test_report_refuses_a_run_another_process_writes(run_dir: Path, monkeypatch, capsys) -> None:
    from pettingllms_cli.training.lock import LOCK_FILE

    (run_dir / "report.md").unlink(missing_ok=True)
    fd = os.open(run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT)  # a live `train` holds this flock
    try:
        os.write(fd, json.dumps({"pid": 4242, "command": "pettingllms train x"}).encode())
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert run_cli(["report", str(run_dir)], monkeypatch) == 2
        one_error_line(capsys, "4242")
        assert not (run_dir / "report.md").exists()
    finally:
        os.close(fd)


# --- 2. compare stops like train ------------------------------------------------------------------------------
def compare_specs(folder: Path) -> tuple[Path, Path]:
    """Two tiny arms (the smoke team and a lone agent), 6 steps, so a seed is stopped mid-way."""
    from tests.test_compare import write_specs

    train = {"problems_per_step": 1, "max_new_tokens": 4, "checkpoint_every": 100, "steps": 6}
    return write_specs(folder, env={"max_turns": 1, "eval_problems": 1}, train=train)


def test_sigterm_stops_compare_after_the_step_and_a_rerun_resumes_the_seed(tmp_path: Path, monkeypatch) -> None:
    from tests.test_exit_codes import start, wait_until

    solo, team = compare_specs(tmp_path)
    out = tmp_path / "out"
    args = ["compare", str(solo), str(team), "--seeds", "2", "--out", str(out), "--budget", "steps"]
    proc = start(*args)
    second = out / "solo" / "seed1"
    wait_until(lambda: (second / "metrics.jsonl").is_file() and steps_logged(second), proc, "a step of the second seed")
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)

    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    done = steps_logged(second)
    assert 1 <= len(done) < 6 and done == list(range(1, len(done) + 1))
    assert sorted(p.name for p in (second / "checkpoints").iterdir()) == [f"step_{len(done)}"]
    assert (out / "solo" / "seed0" / "eval_after.json").is_file()
    assert "solo seed1" in stderr and "compare" in stderr  # what is missing, and the command that continues
    assert not (out / "compare.json").exists(), "an interrupted compare must not average a partial seed"
    first_weights = (out / "solo" / "seed0" / "checkpoints" / "step_6" / "solver" / "adapter_model.safetensors").stat()

    assert run_cli(args, monkeypatch) == 0
    assert (second / "resumes.jsonl").is_file(), "the stopped seed must be resumed, not retrained"
    assert not (out / "solo" / "seed0" / "resumes.jsonl").exists()
    after = (out / "solo" / "seed0" / "checkpoints" / "step_6" / "solver" / "adapter_model.safetensors").stat()
    assert after.st_mtime_ns == first_weights.st_mtime_ns, "the finished seed was retrained"
    assert steps_logged(second) == list(range(1, 7))
    result = json.loads((out / "compare.json").read_text())
    assert all(r["steps"] == 6 for runs in result["runs"].values() for r in runs)


def test_compare_stopped_inside_a_seed_raises_stopped_naming_the_missing_seeds(tmp_path: Path) -> None:
    """In-process: the first signal during training ends compare with `Stopped` (exit 130), no report written."""
    import pettingllms_cli.training.loop as train_mod
    from pettingllms_cli.errors import Stopped
    from pettingllms_cli.training.compare import compare

    solo, team = compare_specs(tmp_path)
    out = tmp_path / "out"
    real_update = train_mod.update
    calls = []

    def update_then_signal(*args, **kwargs):
        calls.append(1)
        stats = real_update(*args, **kwargs)
        if len(calls) == 8:  # step 2 of the second seed
            os.kill(os.getpid(), signal.SIGTERM)
        return stats

    with mock.patch.object(train_mod, "update", update_then_signal), mock.patch.object(train_mod, "write_report"):
        with pytest.raises(Stopped) as stopped:
            compare([solo, team], seeds=2, out=out, budget="steps", console=Console(quiet=True))
    assert steps_logged(out / "solo" / "seed1") == [1, 2]
    message = str(stopped.value)
    assert "solo seed1" in message and "smoke seed0" in message and "smoke seed1" in message
    assert "solo seed0" not in message.split("missing", 1)[1]
    assert not (out / "compare.json").exists()
