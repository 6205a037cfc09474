"""`pettingllms compare` on two tiny specs (single agent vs team), 2 steps x 2 seeds: files, rows, reuse, refusals."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]
TINY = {"max_turns": 1, "eval_problems": 2}  # one round, two held-out problems: seconds per run
BUDGET = {"problems_per_step": 1, "max_new_tokens": 4}


def write_specs(folder: Path) -> tuple[Path, Path]:
    """The smoke team (multi layout, two agents) and a single-agent variant on the same budget."""
    team = yaml.safe_load((ROOT / "experiments" / "smoke.yaml").read_text())
    team["env"] |= TINY
    team["train"] |= BUDGET
    team["algorithm"]["group_size"] = 2
    solo = json.loads(json.dumps(team))
    solo["name"] = "solo"
    solo["env"]["layout"] = "single"
    solo["agents"] = {"solver": {"model": "tiny", "roles": ["solver"], "lora": {"r": 4, "alpha": 8}}}
    paths = folder / "solo.yaml", folder / "team.yaml"
    paths[0].write_text(yaml.safe_dump(solo))
    paths[1].write_text(yaml.safe_dump(team))
    return paths


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    """One compare call (4 trainings) shared by the tests; returns (spec paths, out dir, stdout)."""
    folder = tmp_path_factory.mktemp("compare")
    solo, team = write_specs(folder)
    out = folder / "out"
    mp = pytest.MonkeyPatch()
    try:
        code = run_cli(["compare", str(solo), str(team), "--seeds", "2", "--max-steps", "2", "--out", str(out)], mp)
    finally:
        mp.undo()
    assert code == 0
    return (solo, team), out


def test_writes_three_files_with_one_row_per_spec(compared):
    _, out = compared
    result = json.loads((out / "compare.json").read_text())
    assert [r["spec"] for r in result["rows"]] == ["solo", "smoke"]
    for row in result["rows"]:
        assert row["seeds"] == 2
        lo, hi = row["final_success_ci"]
        assert 0.0 <= lo <= row["final_success"] <= hi <= 1.0
        assert row["train_tokens"] > 0 and row["train_seconds"] > 0
        assert row["mean_attempts"] == pytest.approx(1.0)  # max_turns 1: attempts are 1 solved or not
    assert [r["pair"] for r in result["ratios"]] == ["smoke/solo"]
    assert result["budget"]["train.steps"] == [2, 2]
    runs = result["runs"]
    assert {name: [r["seed"] for r in rs] for name, rs in runs.items()} == {"solo": [0, 1], "smoke": [0, 1]}
    assert all(r["status"] == "trained" and r["steps"] == 2 for rs in runs.values() for r in rs)
    # Every run was scored on the same held-out problems.
    for rs in runs.values():
        for r in rs:
            scored = json.loads((Path(r["run_dir"]) / "compare_eval.json").read_text())
            assert [e["id"] for e in scored["final"]["per_episode"]] == result["held_out"]["problems"]
    md = (out / "compare.md").read_text()
    assert md.count("\n| solo | single | 1 | 2 |") == 1 and md.count("\n| smoke | multi | 2 | 2 |") == 1
    assert "| smoke/solo |" in md


def test_html_parses_and_inlines_the_curves(compared):
    _, out = compared

    class Collect(HTMLParser):
        def __init__(self):
            super().__init__()
            self.tags, self.images = [], []

        def handle_starttag(self, tag, attrs):
            self.tags.append(tag)
            if tag == "img":
                self.images.append(dict(attrs)["src"])

    parser = Collect()
    parser.feed((out / "compare.html").read_text())
    assert parser.tags.count("table") == 3  # specs, ratios, runs
    assert parser.images and all(src.startswith("data:image/png;base64,") for src in parser.images)


def test_second_call_reuses_runs(compared, monkeypatch, capsys):
    (solo, team), out = compared
    watched = sorted(out.glob("*/seed*/metrics.jsonl")) + sorted(out.glob("*/seed*/compare_eval.json"))
    assert len(watched) == 8
    before = {p: p.stat().st_mtime_ns for p in watched}
    capsys.readouterr()
    assert run_cli(["compare", str(solo), str(team), "--seeds", "2", "--max-steps", "2", "--out", str(out)], monkeypatch) == 0
    assert capsys.readouterr().out.count("reusing") == 4
    assert {p: p.stat().st_mtime_ns for p in watched} == before  # neither retrained nor re-scored
    result = json.loads((out / "compare.json").read_text())
    assert all(r["status"] == "reused" for rs in result["runs"].values() for r in rs)


def test_changed_spec_is_not_reused(compared, tmp_path):
    from pettingllms_cli.compare import run_state, seeded

    (solo, _), out = compared
    assert run_state(seeded(solo, 0, 2), out / "solo" / "seed0") == "done"
    assert run_state(seeded(solo, 0, 3), out / "solo" / "seed0") == "stale"  # another budget
    assert run_state(seeded(solo, 1, 2), out / "solo" / "seed0") == "stale"  # another seed
    assert run_state(seeded(solo, 0, 2), tmp_path / "fresh") == "new"


@pytest.fixture
def spec_files(tmp_path) -> tuple[Path, Path]:
    return write_specs(tmp_path)


def test_refuses_one_spec(spec_files, tmp_path, monkeypatch, capsys):
    assert run_cli(["compare", str(spec_files[0]), "--out", str(tmp_path / "o")], monkeypatch) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "at least two specs" in err


def test_refuses_specs_of_different_envs(spec_files, tmp_path, monkeypatch, capsys):
    from pettingllms_cli.envs import ENVS
    from pettingllms_cli.envs.math_tool import MathToolEnv

    monkeypatch.setitem(ENVS, "other_tool_v0", type("OtherEnv", (MathToolEnv,), {"name": "other_tool_v0"}))
    other = yaml.safe_load(spec_files[1].read_text())
    other["env"]["name"] = "other_tool_v0"
    other["name"] = "other"
    (tmp_path / "other.yaml").write_text(yaml.safe_dump(other))
    assert run_cli(["compare", str(spec_files[0]), str(tmp_path / "other.yaml"), "--out", str(tmp_path / "o")], monkeypatch) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "different envs" in err


def test_refuses_unequal_budgets_unless_allowed(spec_files, tmp_path, monkeypatch, capsys):
    from pettingllms_cli.compare import check_comparable, load_arms

    bigger = yaml.safe_load(spec_files[1].read_text())
    bigger["algorithm"]["group_size"] = 4
    (tmp_path / "bigger.yaml").write_text(yaml.safe_dump(bigger))
    paths = [spec_files[0], tmp_path / "bigger.yaml"]
    assert run_cli(["compare", *map(str, paths), "--out", str(tmp_path / "o")], monkeypatch) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "algorithm.group_size" in err and "--allow-unequal" in err
    check_comparable(paths, load_arms(paths, None), allow_unequal=True)  # accepted when asked for
    assert not (tmp_path / "o").exists()  # refused before any training


def test_refuses_two_specs_with_one_name(spec_files, monkeypatch, capsys, tmp_path):
    assert run_cli(["compare", str(spec_files[1]), str(spec_files[1]), "--out", str(tmp_path / "o")], monkeypatch) == 2
    assert "distinct `name`" in capsys.readouterr().err
