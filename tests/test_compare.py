"""`pettingllms compare` on two tiny specs (single agent vs team), 2 steps x 2 seeds: files, rows, reuse, refusals,
levelled compute, held-out convergence, the problems each seed was scored on, the verdict and the 80-column table."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from pettingllms_cli.analysis.budget import BUDGETS
from pettingllms_cli.errors import UserError
from pettingllms_cli.spec import load_spec
from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]
TINY = {"max_turns": 1, "eval_problems": 2}  # one round, two held-out problems: seconds per run
BUDGET = {"problems_per_step": 1, "max_new_tokens": 4, "eval_every": 1, "eval_subset": 2}  # a held-out point a step


def write_specs(folder: Path, env: dict = TINY, train: dict = BUDGET) -> tuple[Path, Path]:
    """The smoke team (multi layout, two agents) and a single-agent variant on the same budget."""
    team = yaml.safe_load((ROOT / "experiments" / "smoke.yaml").read_text())
    team["env"] |= env
    team["train"] |= train
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
    arms = [r for r in result["rows"] if r["kind"] == "arm"]
    assert [r["spec"] for r in arms] == ["solo", "smoke"]
    for row in arms:
        assert row["seeds"] == 2
        lo, hi = row["final_success_ci"]
        assert 0.0 <= lo <= row["final_success"] <= hi <= 1.0
        assert row["tokens_total"] > 0 and row["wall_seconds"] > 0 and row["trained_tokens"] > 0
        assert row["optimizer_steps"] > 0 and row["sampled_actions"] > 0
        assert row["actions_total"] == row["sampled_actions"] + row["playout_actions"] + row["intent_actions"]
        assert 0 <= row["effective_optimizer_steps"] <= row["optimizer_steps"]
        assert row["wall_seconds"] == pytest.approx(row["wall_seconds_training"] + row["wall_seconds_measurement"], abs=1e-2)
        assert row["wall_seconds_measurement"] > 0  # the held-out curve (eval_every 1) is timed apart from training
        assert row["converged_seeds"] + row["not_converged_seeds"] == 2
        # max_turns 1: a solved episode took one attempt; with nothing solved there is no attempts figure.
        assert row["mean_attempts"] == (pytest.approx(1.0) if row["final_success"] > 0 else None)
    assert [r["pair"] for r in result["ratios"]] == ["smoke/solo"]
    assert {"improvement_factor_ci", "attempts_factor_ci", "convergence_factor_ci", "success_gain_ci"} <= set(result["ratios"][0])
    runs = result["runs"]
    assert {name: [r["seed"] for r in rs] for name, rs in runs.items()} == {"solo": [0, 1], "smoke": [0, 1]}
    assert all(r["status"] == "trained" for rs in runs.values() for r in rs)
    # The team (2 roles x K=2 a step) is the reference; the lone agent (1 x 2) trains until it has spent as much.
    assert {name: [r["steps"] for r in rs] for name, rs in runs.items()} == {"solo": [4, 4], "smoke": [2, 2]}
    # Every run was scored on the same held-out problems.
    for rs in runs.values():
        for r in rs:
            scored = json.loads((Path(r["run_dir"]) / "compare_eval.json").read_text())
            assert [e["id"] for e in scored["final"]["per_episode"]] == [p["id"] for p in result["held_out"]["problems"]]
    md = (out / "compare.md").read_text()
    # spec, layout, roles, seeds, K: both arms keep their group size; the lone agent takes more steps instead.
    assert md.count("\n| solo | single | 1 | 2 | 2 |") == 1 and md.count("\n| smoke | multi | 2 | 2 | 2 |") == 1
    assert "| smoke/solo |" in md


def test_the_untrained_row_is_step_0_of_the_same_runs(compared):
    """Each arm's untrained row is scored from its own runs before training: a fresh team (no adapter trained) on the
    held-out problems gives the same outcome per problem as the run's step 0, and the arm row's gain is final - that."""
    from pettingllms_cli.analysis.evaluate import evaluate
    from pettingllms_cli.policy.adapters import Team
    from pettingllms_cli.training.compare import held_out

    (solo_path, team_path), out = compared
    result = json.loads((out / "compare.json").read_text())
    rows = {r["spec"]: r for r in result["rows"]}
    problems = held_out(load_spec(solo_path, ["seed=0"]), None, None)
    assert [p.id for p in problems] == [p["id"] for p in result["held_out"]["problems"]]
    for name, path in (("solo", solo_path), ("smoke", team_path)):
        untrained, arm = rows[f"{name} (untrained, step 0)"], rows[name]
        assert untrained["kind"] == "untrained" and untrained["of"] == name and untrained["step"] == 0
        assert untrained["actions_total"] == 0 and untrained["optimizer_steps"] == 0  # no training compute
        runs = result["runs"][name]
        assert untrained["final_success"] == pytest.approx(sum(r["initial_success"] for r in runs) / len(runs))
        lo, hi = untrained["final_success_ci"]
        assert lo <= untrained["final_success"] <= hi
        gains = [r["final_success"] - r["initial_success"] for r in runs]
        assert arm["gain_over_untrained"] == pytest.approx(sum(gains) / len(gains))
        assert "paired seeds" in arm["gain_over_untrained_ci_method"]
        scored = json.loads((Path(runs[0]["run_dir"]) / "compare_eval.json").read_text())
        spec = load_spec(path, ["seed=0"])
        fresh = evaluate(Team(spec), spec, problems, n_transcripts=0, score_actions=False)
        assert [e["success"] for e in fresh["per_episode"]] == [e["success"] for e in scored["initial"]["per_episode"]]
        assert [e["actions"] for e in fresh["per_episode"]] == [e["actions"] for e in scored["initial"]["per_episode"]]
    assert "Training bought" in (out / "compare.md").read_text()


def test_the_lone_arm_gets_the_teams_evaluation_compute_and_best_of_k_is_labelled_oracle(compared):
    _, out = compared
    result = json.loads((out / "compare.json").read_text())
    derived = {r["kind"]: r for r in result["rows"] if r["kind"] in ("majority_of_k", "best_of_k_oracle")}
    assert set(derived) == {"majority_of_k", "best_of_k_oracle"} and {r["of"] for r in derived.values()} == {"solo"}
    vote, oracle = derived["majority_of_k"], derived["best_of_k_oracle"]
    k = vote["evaluation"]["k"]
    assert k >= 3 and oracle["evaluation"]["k"] == k and "oracle" in oracle["spec"] and "oracle" not in vote["spec"]
    assert "answer key" in oracle["evaluation"]["picks"] and "no answer key" in vote["evaluation"]["picks"]
    team_runs, solo_runs = result["runs"]["smoke"], result["runs"]["solo"]
    team_tokens = sum(r["eval_per_problem"][1] for r in team_runs) / len(team_runs)
    solo_tokens = sum(r["eval_per_problem"][1] for r in solo_runs) / len(solo_runs)
    assert k * solo_tokens >= team_tokens  # the lone arm samples at least the team's evaluation tokens a problem
    for run in solo_runs:
        votes = json.loads((Path(run["run_dir"]) / "compare_vote.json").read_text())
        assert votes["k"] == k and votes["episodes"] == len(result["held_out"]["problems"])
        assert all(p["k"] == k and 1 <= p["votes"] <= k for p in votes["per_problem"])
        assert all(p["oracle"] or not p["majority"] for p in votes["per_problem"])  # a vote never beats any-of-K
    assert oracle["final_success"] >= vote["final_success"]
    assert "oracle" in (out / "compare.md").read_text()


def test_default_budget_spends_equal_actions_and_says_so(compared):
    _, out = compared
    result = json.loads((out / "compare.json").read_text())
    budget = result["budget"]
    assert budget["mode"] == "actions" and budget["reference"] == "smoke" and "within one step" in budget["how"]
    assert budget["per_seed"] == {"0": 8, "1": 8}  # the team's 2 steps x 1 problem x 2 roles x K=2
    levelled = ["train.stop_at_actions=8", "train.steps=4"]  # steps: the bound, 8 actions at 1 problem x K=2 a step
    assert budget["overrides"] == {"smoke": {"0": [], "1": []}, "solo": {"0": levelled, "1": levelled}}
    assert budget["sampled_actions_per_step"] == {"solo": 2, "smoke": 4}
    for runs in result["runs"].values():
        for run in runs:
            rows = [json.loads(line) for line in (Path(run["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
            assert sum(r["actions_total"] for r in rows) == 8
    assert [row["actions_total"] for row in result["rows"] if row["kind"] == "arm"] == [8, 8]
    assert "within one step's worth (checked)" in (out / "compare.md").read_text()


def test_seed_1_is_scored_on_the_problems_compare_json_lists_and_train_scored_them_too(compared):
    _, out = compared
    result = json.loads((out / "compare.json").read_text())
    listed = [p["question"] for p in result["held_out"]["problems"]]
    for name in ("solo", "smoke"):
        scored = json.loads((out / name / "seed1" / "compare_eval.json").read_text())
        for when in ("initial", "final"):
            assert [e["question"] for e in scored[when]["per_episode"]] == listed
        own = json.loads((out / name / "seed1" / "eval_after.json").read_text())
        # One held-out set whatever the run's seed: train's own final score is the one compare reports (reused).
        assert [e["question"] for e in own["per_episode"]] == listed
        assert [e["success"] for e in own["per_episode"]] == [e["success"] for e in scored["final"]["per_episode"]]


def test_held_out_curve_is_logged_and_drives_convergence(compared):
    _, out = compared
    result = json.loads((out / "compare.json").read_text())
    assert result["convergence"]["metric"].startswith("heldout_success_rate")
    for runs in result["runs"].values():
        for run in runs:
            assert [s for s, _ in run["heldout_curve"]] == list(range(1, run["steps"] + 1))  # train.eval_every: 1


def test_verdict_opens_the_reports_and_the_terminal(compared, tmp_path, monkeypatch, capsys):
    (solo, team), out = compared
    result = json.loads((out / "compare.json").read_text())
    verdict = result["verdict"]
    assert "held-out success" in verdict and "--budget actions" in verdict and "sampled actions" in verdict
    assert verdict.count(".") >= 1 and "\n" not in verdict
    md = (out / "compare.md").read_text().splitlines()
    assert md[2] == f"**{verdict}**"  # right under the title
    assert verdict in (out / "compare.html").read_text().replace("&#x27;", "'")


def table_result(spec_a: str, spec_b: str) -> dict:
    """A compare result with two arms and their ratio row, as the tables read it."""
    row = {
        "spec": spec_a,
        "initial_success": 0.5,
        "final_success": 0.875,
        "final_success_ci": [0.6, 1.0],
        "mean_attempts": 1.25,
        "converged_seeds": 2,
        "seeds": 3,
        "actions_total": 12345.0,
    }
    return {
        "rows": [row, {**row, "spec": spec_b}],
        "ratios": [
            {
                "pair": f"{spec_b}/{spec_a}",
                **{f"{k}_factor": 1.234 for k in ("improvement", "attempts", "convergence")},
                **{f"{k}_factor_ci": [0.5, 2.5] for k in ("improvement", "attempts", "convergence")},
            }
        ],
    }


def test_console_table_fits_80_columns_with_whole_spec_names():
    from rich.console import Console

    from pettingllms_cli.training.compare import console_table, ratios_table

    result = table_result("quickstart_single_long_name", "quickstart")
    console = Console(width=80, record=True)
    console.print(console_table(result))
    console.print(ratios_table(result))
    text = console.export_text()
    assert max(map(len, text.splitlines())) <= 80
    assert "quickstart_single_long_name" in text  # one piece, not wrapped


def test_tables_in_a_log_keep_whole_names_and_headers(capsys):
    """Under nohup or CI stdout is a file, where rich would narrow the tables to 80 columns and fold long names."""
    from pettingllms_cli.cli.compare import print_result

    long_a, long_b = "baseline_single_agent_" + "a" * 40, "planner_and_verifier_team_" + "b" * 40
    result = {"verdict": "B solves more held-out problems than A at equal sampled actions.", **table_result(long_a, long_b)}
    print_result(result)  # capsys: stdout is not a terminal
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == result["verdict"]
    for name in (long_a, long_b, f"{long_b}/{long_a}"):
        assert any(name in line for line in lines), (name, lines)  # whole, on one line
    headers = ("spec", "before", "after", "95% CI", "attempts", "converged", "actions/seed", "B/A", "success", "convergence")
    assert all(any(h in line for line in lines) for h in headers), lines
    assert not any("…" in line for line in lines), lines  # nothing cut with an ellipsis
    assert max(map(len, lines)) > 80  # the natural width, not the 80 columns rich assumes for a file


def test_unknown_budget_is_refused(spec_files, tmp_path, monkeypatch, capsys):
    args = ["compare", *map(str, spec_files), "--budget", "flops", "--out", str(tmp_path / "o")]
    assert run_cli(args, monkeypatch) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'--budget'" in err and "'flops'" in err  # typer checks the `Budget` Literal
    assert all(f"'{b}'" in err for b in BUDGETS)
    assert not (tmp_path / "o").exists()


def test_unknown_budget_from_python_is_refused(spec_files, tmp_path):
    from pettingllms_cli.training.compare import compare

    with pytest.raises(UserError, match=r"--budget 'flops': use one of actions, tokens, steps"):
        compare(spec_files, out=tmp_path / "o", budget="flops")  # type: ignore[arg-type]
    assert not (tmp_path / "o").exists()


def test_refuses_arms_whose_lr_differs(spec_files, tmp_path, monkeypatch, capsys):
    faster = yaml.safe_load(spec_files[1].read_text())
    faster["algorithm"]["lr"] = 0.5
    (tmp_path / "faster.yaml").write_text(yaml.safe_dump(faster))
    args = ["compare", str(spec_files[0]), str(tmp_path / "faster.yaml"), "--out", str(tmp_path / "o")]
    assert run_cli(args, monkeypatch) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "algorithm.lr" in err and "0.01" in err and "0.5" in err and "--allow-unequal" in err
    assert not (tmp_path / "o").exists()  # refused before any training


def test_team_keys_may_differ_but_models_and_lora_may_not(spec_files):
    from pettingllms_cli.analysis.budget import check_equal_arms
    from pettingllms_cli.errors import UserError
    from pettingllms_cli.spec import parse_spec

    solo, team = (yaml.safe_load(p.read_text()) for p in spec_files)
    team |= {"reward": {**team["reward"], "credit": "difference"}, "assignment": {"mode": "rotate"}}
    team["train"] = {**team["train"], "report_to": ["tensorboard"]}  # a tracker changes nothing a step computes
    check_equal_arms(list(spec_files), [parse_spec(solo), parse_spec(team)])  # credit and assignment define a team
    for key, value in (("lora", {"r": 8, "alpha": 8}), ("temperature", 0.7)):
        other = json.loads(json.dumps(solo))
        if key == "lora":
            other["agents"]["solver"]["lora"] = value
        else:
            other["train"]["temperature"] = value
        with pytest.raises(UserError, match="--allow-unequal"):
            check_equal_arms(list(spec_files), [parse_spec(other), parse_spec(team)])


def test_convergence_comes_from_the_held_out_curve(tmp_path, spec_files):
    from pettingllms_cli.spec import load_spec
    from pettingllms_cli.training.compare import run_summary

    spec = load_spec(spec_files[1])
    run = tmp_path / "run"
    run.mkdir()
    # Training success saturates at once; held-out success stays flat at 0.25.
    rows = [
        {"step": s, "team_success_rate": 1.0, "best_branch_success_rate": 1.0, "heldout_success_rate": 0.25} for s in range(1, 7)
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    scored = {
        when: {"team_success_rate": 0.25, "successes": 1, "episodes": 4, "mean_attempts_to_success": 1.0}
        for when in ("initial", "final")
    }
    assert run_summary(spec, run, "trained", scored, threshold=0.5, window=3)["convergence_step"] is None
    for r in rows[3:]:
        r["heldout_success_rate"] = 0.75  # held-out climbs at step 4: the 3-point mean reaches 0.5 at step 5
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert run_summary(spec, run, "trained", scored, threshold=0.5, window=3)["convergence_step"] == 5


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


def test_a_run_that_scored_other_problems_is_scored_again(compared, tmp_path):
    """train's own scores are reused only when the file itself lists compare's problems, in order."""
    import shutil

    from pettingllms_cli.training.compare import held_out
    from pettingllms_cli.training.compare_runs import train_eval

    (solo, _), out = compared
    problems = held_out(load_spec(solo), None, None)
    run = shutil.copytree(out / "solo" / "seed1", tmp_path / "seed1")
    assert train_eval(run, "eval_after.json", problems) is not None
    scored = json.loads((run / "eval_after.json").read_text())
    scored["per_episode"][0]["question"] += " (another seed's problem)"
    (run / "eval_after.json").write_text(json.dumps(scored))
    assert train_eval(run, "eval_after.json", problems) is None


def test_changed_spec_is_not_reused(compared, tmp_path):
    from pettingllms_cli.training.compare import run_state, seeded

    (solo, _), out = compared
    levelled = ["train.stop_at_actions=8", "train.steps=4"]  # what --budget actions gave the lone agent
    assert run_state(seeded(solo, 0, 2, levelled), out / "solo" / "seed0") == "done"
    assert run_state(seeded(solo, 0, 2), out / "solo" / "seed0") == "stale"  # no budget
    assert run_state(seeded(solo, 0, 2, ["train.stop_at_actions=6", "train.steps=4"]), out / "solo" / "seed0") == "stale"
    assert run_state(seeded(solo, 1, 2, levelled), out / "solo" / "seed0") == "stale"  # another seed
    assert run_state(seeded(solo, 0, 2, levelled), tmp_path / "fresh") == "new"


def test_run_from_before_a_new_knob_is_reused_and_resumable(compared, tmp_path):
    """A finished run whose spec.yaml predates a knob (absent: its default) is the same spec; the knob set is not."""
    import shutil

    import yaml

    from pettingllms_cli.training.compare import run_state, seeded
    from pettingllms_cli.training.rundir import spec_changes

    (solo, _), out = compared
    spec = seeded(solo, 0, 2, ["train.stop_at_actions=8", "train.steps=4"])
    run = shutil.copytree(out / "solo" / "seed0", tmp_path / "seed0")
    saved = yaml.safe_load((run / "spec.yaml").read_text())
    del saved["algorithm"]["tis_cap"], saved["vllm"]  # written by a version without these knobs
    (run / "spec.yaml").write_text(yaml.safe_dump(saved))
    assert run_state(spec, run) == "done"
    assert spec_changes(saved, spec.model_dump(mode="json")) == {}  # --resume accepts it too
    saved["algorithm"]["update_epochs"] = 2  # a knob that was set is a change
    (run / "spec.yaml").write_text(yaml.safe_dump(saved))
    assert run_state(spec, run) == "stale"
    assert set(spec_changes(saved, spec.model_dump(mode="json"))) == {"algorithm.update_epochs"}


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
    from pettingllms_cli.training.compare import check_comparable, load_arms

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


def test_data_file_scores_every_arm_on_its_problems(compared, tmp_path, monkeypatch):
    import shutil

    (solo, team), out = compared
    copy = tmp_path / "out"
    shutil.copytree(out, copy)  # the trained runs, so only scoring happens
    data = tmp_path / "mine.jsonl"
    records = [{"question": f"Ann has {i} pens and buys 3 more. How many pens?", "answer": f"#### {i + 3}"} for i in range(12)]
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    args = ["compare", str(solo), str(team), "--seeds", "2", "--max-steps", "2", "--out", str(copy), "--data", str(data)]
    assert run_cli([*args, "--episodes", "2"], monkeypatch) == 0
    result = json.loads((copy / "compare.json").read_text())
    listed = [p["question"] for p in result["held_out"]["problems"]]
    assert result["held_out"]["data"] == str(data) and all(q.startswith("Ann has") for q in listed) and len(listed) == 2
    for runs in result["runs"].values():
        assert all(r["status"] == "reused" for r in runs)
        for r in runs:
            scored = json.loads((Path(r["run_dir"]) / "compare_eval.json").read_text())
            assert [e["question"] for e in scored["final"]["per_episode"]] == listed


def test_budget_modes_level_compute_as_documented(spec_files):
    from pettingllms_cli.analysis.budget import budget_overrides, reference_arm
    from pettingllms_cli.spec import load_spec

    solo, team = (load_spec(p) for p in spec_files)  # 1 role and 2 roles, K=2, 1 problem a step, 2 steps
    assert reference_arm([solo, team]) == 1 and reference_arm([team, solo]) == 0 and reference_arm([solo, solo]) == 0
    assert budget_overrides(solo, "actions", 30) == ["train.stop_at_actions=30", "train.steps=15"]  # >= K x 1 a step
    assert budget_overrides(solo, "tokens", 3) == ["train.stop_at_tokens=3", "train.steps=2"]  # never below train.steps
    assert budget_overrides(solo, "steps", 30) == []


def test_a_run_stops_once_its_running_total_reaches_the_budget(spec_files):
    from pettingllms_cli.spec import load_spec
    from pettingllms_cli.training.metrics import budget_reached, running_totals

    rows = [{"actions_total": 12, "tokens_generated": 60}, {"actions_total": 36, "tokens_generated": 40}]
    by_tokens = load_spec(spec_files[0], ["train.stop_at_tokens=100"])
    assert budget_reached(by_tokens, running_totals(rows)) and not budget_reached(by_tokens, running_totals(rows[:1]))
    by_actions = load_spec(spec_files[0], ["train.stop_at_actions=49"])
    assert not budget_reached(by_actions, running_totals(rows))  # 48 actions: one more step
    assert not budget_reached(load_spec(spec_files[0]), running_totals(rows * 100))  # no budget: train.steps decides


def test_a_run_that_spent_its_budget_is_finished_below_train_steps(compared, tmp_path):
    """train.steps is an upper bound once a budget is set: a run that reached it is reused, one that did not resumes."""
    import shutil

    from pettingllms_cli.training.compare import run_state, seeded

    (solo, _), out = compared
    run = shutil.copytree(out / "solo" / "seed0", tmp_path / "seed0")  # 4 steps, 8 actions, checkpointed at step 4
    for total, state in ((8, "done"), (9, "partial")):
        spec = seeded(solo, 0, 2, [f"train.stop_at_actions={total}", "train.steps=50"])
        (run / "spec.yaml").write_text(yaml.safe_dump(spec.model_dump(mode="json")))
        assert run_state(spec, run) == state


def test_budget_below_one_step_of_an_arm_exits_2_naming_it(spec_files, tmp_path, monkeypatch, capsys):
    """The team spends 4 actions in its 1 step; the lone agent (K=8) spends 8 in one: no budget of 4 fits it."""
    solo = yaml.safe_load(spec_files[0].read_text())
    solo["algorithm"]["group_size"] = 8
    spec_files[0].write_text(yaml.safe_dump(solo))
    args = ["compare", *map(str, spec_files), "--seeds", "1", "--max-steps", "1", "--allow-unequal", "--out", str(tmp_path / "o")]
    assert run_cli(args, monkeypatch) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "solo seed0 spends 8 actions in one step" in err and "budget of 4" in err and "smallest budget that works is 8" in err
    assert not (tmp_path / "o" / "compare.json").exists()


def test_lone_agent_and_deferred_team_spend_equal_actions(tmp_path, monkeypatch):
    """The issue's case: a lone agent against the math `team` layout (planner and validator deferred: their candidates
    are played out to the reader), default budget, tiny model, 2 steps, 1 seed. Play-outs count: actions_total agrees
    within one of the lone agent's steps (levelling group sizes instead left the lone agent at half the team's)."""
    solo_path, team_path = write_specs(tmp_path)
    team = yaml.safe_load(team_path.read_text())
    team["name"], team["env"]["layout"] = "team", "team"
    lora = {"r": 4, "alpha": 8}
    team["agents"] = {role: {"model": "tiny", "roles": [role], "lora": lora} for role in ("planner", "validator", "reader")}
    for path, tree in ((team_path, team), (solo_path, yaml.safe_load(solo_path.read_text()))):
        tree["train"]["eval_every"] = 2  # one held-out point per 2 steps: the lone agent takes many
        path.write_text(yaml.safe_dump(tree))
    out = tmp_path / "out"
    args = ["compare", str(solo_path), str(team_path), "--seeds", "1", "--max-steps", "2", "--out", str(out)]
    assert run_cli(args, monkeypatch) == 0
    result = json.loads((out / "compare.json").read_text())
    assert result["budget"]["reference"] == "team" and [row["roles"] for row in result["rows"] if row["kind"] == "arm"] == [1, 3]
    (solo_run,), (team_run,) = result["runs"]["solo"], result["runs"]["team"]
    assert team_run["steps"] == 2 and team_run["playout_actions"] > 0  # the deferred roles' play-outs
    lines = (out / "solo" / "seed0" / "metrics.jsonl").read_text().splitlines()
    solo_steps = [json.loads(line)["actions_total"] for line in lines]
    assert sum(solo_steps) == solo_run["actions_total"] and len(solo_steps) == solo_run["steps"] > 2
    assert 0 <= solo_run["actions_total"] - team_run["actions_total"] < solo_steps[-1]  # within one step's worth
    assert result["budget"]["actions_total"] == {"solo": solo_run["actions_total"], "team": team_run["actions_total"]}


def test_rescoring_restores_the_learned_role_assignment(spec_files, tmp_path, monkeypatch):
    """A rotate run is scored with the assignment its checkpoint learned, not with the agents' static roles."""
    import pettingllms_cli.analysis.evaluate as evaluate
    import pettingllms_cli.policy.adapters as policy
    import pettingllms_cli.training.checkpoint as checkpoint
    import pettingllms_cli.training.trained as trained
    from pettingllms_cli.spec import load_spec
    from pettingllms_cli.training.compare import score_run

    spec = load_spec(spec_files[1], ["assignment.mode=rotate"])
    # The run learned that the verifier agent calls better and the caller agent verifies better.
    learned = {"verifier/tool_caller": [1.0], "caller/tool_caller": [0.0], "caller/verifier": [1.0], "verifier/verifier": [0.0]}
    state = {"roles": {"mode": "rotate", "history": learned, "tries": dict.fromkeys(learned, 1)}}
    played = []

    class FakeTeam:
        def __init__(self, spec):
            pass

    def fake_evaluate(team, spec, problems, **kwargs):
        played.append(kwargs["assignment"])
        return {"team_success_rate": 0.0, "successes": 0, "episodes": len(problems), "per_episode": []}

    run = tmp_path / "run"
    (run / "checkpoints" / "step_2").mkdir(parents=True)
    monkeypatch.setattr(checkpoint, "latest_checkpoint", lambda run_dir, agents=None: run / "checkpoints" / "step_2")
    for module in (checkpoint, trained):  # trained.py loads the final checkpoint; it imported these by name
        monkeypatch.setattr(module, "load_adapters", lambda team, folder: None)
        monkeypatch.setattr(module, "read_state", lambda folder: state)
    monkeypatch.setattr(policy, "Team", FakeTeam)
    monkeypatch.setattr(trained, "Team", FakeTeam)
    monkeypatch.setattr(evaluate, "evaluate", fake_evaluate)
    score_run(spec, run, evaluate.eval_problems(spec, "test", 0, 2))
    assert played == [
        {"tool_caller": "caller", "verifier": "verifier"},  # untrained: the static owners
        {"tool_caller": "verifier", "verifier": "caller"},  # trained: what the run learned
    ]
