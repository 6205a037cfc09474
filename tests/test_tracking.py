"""`train.report_to` (issue 30): each metrics.jsonl row reaches TensorBoard, wandb and trackio; bad input is one line."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from pettingllms_cli.errors import UserError
from pettingllms_cli.spec import load_spec
from pettingllms_cli.training.tracking import TB_DIR, Trackers, check_trackers
from tests.conftest import FAST

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "experiments" / "smoke.yaml"


def event_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in the TensorBoard event files under `folder`, read back as TensorBoard reads them."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"scalars": 0})  # 0: keep every point
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_tensorboard_event_file_holds_team_success_for_every_step(tmp_path: Path) -> None:
    from rich.console import Console

    from pettingllms_cli.training.loop import train

    spec = load_spec(SMOKE, [*FAST, "train.steps=3", "train.eval_every=1", "train.report_to=[tensorboard]"])
    run_dir = train(spec, tmp_path / "run", console=Console(quiet=True))
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert list((run_dir / TB_DIR).glob("events.out.tfevents.*")), "no event file in the run directory's tb/"
    logged = event_scalars(run_dir / TB_DIR)
    expected = [(r["step"], pytest.approx(r["team_success_rate"])) for r in rows]
    assert logged["team_success_rate"] == expected == [(1, expected[0][1]), (2, expected[1][1]), (3, expected[2][1])]
    assert [s for s, _ in logged["tokens_generated"]] == [1, 2, 3]
    after = json.loads((run_dir / "eval_after.json").read_text())["team_success_rate"]
    assert logged["eval_after/team_success_rate"] == [(3, pytest.approx(after))]
    before = json.loads((run_dir / "eval_before.json").read_text())["per_episode"][: spec.train.eval_subset]
    start = sum(e["success"] for e in before) / len(before)  # the untrained team on the curve's problems
    curve = [(0, pytest.approx(start))] + [(r["step"], pytest.approx(r["heldout_success_rate"])) for r in rows]
    assert logged["heldout_success_rate"] == curve  # the held-out curve from step 0, as the report draws it


def test_resume_hides_the_events_past_the_checkpoint(tmp_path: Path) -> None:
    """A resume from step 1 writes steps 2.. again; TensorBoard must not show both copies (purge_step)."""
    spec = load_spec(SMOKE, [*FAST, "train.report_to=[tensorboard]"])
    with Trackers(spec, tmp_path) as first:
        for step in (1, 2, 3):
            first.log({"step": step, "team_success_rate": 0.1 * step})  # killed after step 3, last checkpoint at 1
    with Trackers(spec, tmp_path, resumed_at=1) as again:
        for step in (2, 3):
            again.log({"step": step, "team_success_rate": 0.5})
    assert event_scalars(tmp_path / TB_DIR)["team_success_rate"] == [(1, pytest.approx(0.1)), (2, 0.5), (3, 0.5)]


class FakeRun:
    """What the loop uses of a wandb / trackio run, recording each call."""

    def __init__(self, **init: object) -> None:
        self.init, self.logged, self.finished = init, [], False

    def log(self, values: dict, step: int) -> None:
        self.logged.append((step, values))

    def finish(self) -> None:
        self.finished = True


def fake_package(monkeypatch: pytest.MonkeyPatch, name: str) -> list[FakeRun]:
    runs: list[FakeRun] = []

    def init(**kwargs: object) -> FakeRun:
        runs.append(FakeRun(**kwargs))
        return runs[-1]

    monkeypatch.setitem(sys.modules, name, SimpleNamespace(init=init, Image=lambda path: ("image", Path(path).name)))
    return runs


@pytest.mark.parametrize("name", ["wandb", "trackio"])
def test_each_row_reaches_wandb_and_trackio_at_its_step(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = fake_package(monkeypatch, name)
    monkeypatch.setenv(f"{name.upper()}_PROJECT", "my-project")
    spec = load_spec(SMOKE, [f"train.report_to=[{name}]"])
    (tmp_path / "plots").mkdir()
    (tmp_path / "plots" / "team_success.png").write_bytes(b"")  # the fake Image never opens it
    (tmp_path / "eval_after.json").write_text('{"team_success_rate": 0.75}')
    with Trackers(spec, tmp_path) as trackers:
        trackers.log({"step": 1, "team_success_rate": 0.5, "loss/caller": None, "reward/caller": 0.25, "env": "math"})
        trackers.log({"step": 2, "team_success_rate": 1.0, "loss/caller": 0.01, "reward/caller": 0.5})
        trackers.end(tmp_path, 2)
    (run,) = runs
    assert run.init["project"] == "my-project" and run.init["name"] == "smoke"
    assert run.init["config"]["train"]["report_to"] == [name]
    assert run.logged == [
        (1, {"team_success_rate": 0.5, "reward/caller": 0.25}),  # no null, no text
        (2, {"team_success_rate": 1.0, "loss/caller": 0.01, "reward/caller": 0.5}),
        (2, {"eval_after/team_success_rate": 0.75}),  # eval_before.json is missing here: not logged
        (2, {"plots/team_success": ("image", "team_success.png")}),
    ]
    assert run.finished


@pytest.mark.parametrize("name", ["wandb", "trackio"])
def test_a_missing_tracker_is_one_line_naming_the_install(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, name, None)  # import fails as if not installed
    with pytest.raises(UserError, match=rf"^train.report_to: {name} is not installed; install it with `pip install {name}`"):
        check_trackers(["tensorboard", name])


def test_train_with_a_missing_tracker_exits_2_before_any_run_dir(tmp_path: Path) -> None:
    missing = next((n for n in ("trackio", "wandb") if importlib.util.find_spec(n) is None), None)
    if missing is None:
        pytest.skip("wandb and trackio are both installed here")
    args = ["train", str(SMOKE), "--out", str(tmp_path / "run"), "--set", f"train.report_to=[tensorboard,{missing}]"]
    proc = subprocess.run([sys.executable, "-m", "pettingllms_cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output
    assert f"pip install {missing}" in output and "Traceback" not in output
    assert len(output.strip().splitlines()) == 1, output
    assert not (tmp_path / "run").exists()  # refused before the run directory (and any weights)


def test_an_unknown_sink_lists_the_allowed_ones() -> None:
    with pytest.raises(UserError, match=r"train\.report_to\.0: .*'tensorboard', 'wandb' or 'trackio'"):
        load_spec(SMOKE, ["train.report_to=[tensorbord]"])
