"""report.md / report.html from a run directory: the run header and its one-sentence summary, plots inlined (the
held-out curve from step 0, no panel for what was not measured), valid HTML, the same held-out problems before and
after training as conversations, failures included; compare.html's curves, sections and links to each run's report."""

from __future__ import annotations

import base64
import json
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from pettingllms_cli.analysis.report import heldout_points, read_eval, read_metrics, write_report
from tests.conftest import run_cli

VOID = {"meta", "img", "br", "hr", "link", "input", "wbr"}


class StrictParser(HTMLParser):
    """Collects image sources and text, and checks that every element is closed in order."""

    def __init__(self):
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.images: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs)["src"])
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1] if self.stack else 'nothing'}")
        else:
            self.stack.pop()

    def handle_data(self, data):
        self.text.append(data)


def parse_html(text: str) -> StrictParser:
    parser = StrictParser()
    parser.feed(text)
    parser.close()
    assert not parser.errors and not parser.stack, (parser.errors, parser.stack)
    return parser


def episode(i: int, success: bool, answer: int = 7) -> dict:
    """One per-episode record as eval files keep it: the outcome and each role's action with what the env made of it."""
    return {
        "id": f"test-{i}",
        "question": f"Tom has 3 apples & gets {i} more.",
        "success": success,
        "attempts": 1 if success else None,
        "actions": ["<tool_call>...</tool_call>", f"Answer: {answer} <b>"],
        "transcript": [
            {
                "turn": 0,
                "role": "tool_caller",
                "text": '<tool_call>{"name": "calculator", "arguments": {"expression": "3+4"}}</tool_call>',
                "tool_call": "3+4 = 7",
            },
            {"turn": 0, "role": "verifier", "text": f"Answer: {answer} <b>", "answer": float(answer)},
        ],
    }


def fake_eval(outcomes: list[bool], transcripts: list[dict]) -> dict:
    successes = sum(outcomes)
    return {
        "team_success_rate": successes / len(outcomes),
        "team_success_ci": [0.0, 0.49],
        "successes": successes,
        "mean_attempts_to_success": 1.0,
        "mean_turns": 1.5,
        "episodes": len(outcomes),
        "reward/caller": 0.1,
        "tool_call_validity/tool_caller": 0.5,
        "tokens_generated": 100,
        "seconds": 1.0,
        "per_episode": [episode(i, ok, 7 if ok else 9) for i, ok in enumerate(outcomes)],
        "transcripts": transcripts,
    }


STATE = {  # an episode state, as eval files' `transcripts` hold them (solved ones first)
    "env": "math_tool_v0",
    "problem": {"id": "test-0", "question": "Tom has 3 apples & gets 4 more.", "answer": 7},
    "success": True,
    "transcript": episode(0, True)["transcript"],
}
SPEC = {
    "name": "fake",
    "seed": 0,
    "env": {"name": "math_tool_v0", "layout": "multi"},
    "models": {"smol": {"source": "smollm2-135m-instruct", "dtype": "auto", "quantization": "none"}},
    "agents": {
        "caller": {"model": "smol", "roles": ["tool_caller"], "lora": {"r": 16, "alpha": 32}},
        "verifier": {"model": "smol", "roles": ["verifier"], "lora": {"r": 16, "alpha": 32}},
    },
    "algorithm": {"name": "at_grpo", "rollout": "tree", "group_size": 4, "kl_coef": 0.05, "lr": 3e-4},
    "train": {"steps": 3, "problems_per_step": 4, "eval_every": 3, "eval_subset": 2},
}
BEFORE = [False, True, False, False]  # held-out outcomes: test-0 and test-2 are fixed by training, test-3 is not
AFTER = [True, True, True, False]


def make_run(folder: Path, spec: dict = SPEC, before: list[bool] = BEFORE, after: list[bool] = AFTER) -> Path:
    folder.mkdir()
    (folder / "spec.yaml").write_text(yaml.safe_dump(spec))
    resolved = {"models": {"smol": {"dtype": "float32", "why": "auto: this CPU has no bf16 unit"}}}
    resolved["provenance"] = {"commit": "0123456789ab", "version": "0.1.0", "started": "2026-12-06 01:00 UTC"}
    (folder / "resolved.json").write_text(json.dumps(resolved))
    rows = []
    for step in (1, 2, 3):
        row = {
            "step": step,
            "team_success_rate": step / 4,
            "best_branch_success_rate": step / 3,
            **({"heldout_success_rate": 1.0, "heldout_episodes": 2} if step == 3 else {}),  # train.eval_every: 3
            "tokens_per_second": 10.0,
            "seconds": 2.0,
            "tokens_generated": 50,
        }
        for agent in ("caller", "verifier"):
            row |= {
                f"reward/{agent}": 0.1 * step,
                f"loss/{agent}": 1.0 / step,
                f"kl/{agent}": 0.01 * step if spec["algorithm"]["kl_coef"] else 0.0,
                f"entropy/{agent}": 3.0 - step / 10,
            }
        rows.append(row)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "eval_before.json").write_text(json.dumps(fake_eval(before, [])))
    (folder / "eval_after.json").write_text(json.dumps(fake_eval(after, [STATE])))
    return folder


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return make_run(tmp_path / "run")


def test_html_is_self_contained_with_inlined_png_plots(run_dir):
    write_report(run_dir)
    parser = parse_html((run_dir / "report.html").read_text())
    pngs = [src for src in parser.images if src.startswith("data:image/png;base64,")]
    assert len(pngs) == 5 == len(parser.images)  # team success, reward, loss, kl, entropy; nothing linked
    for src in pngs:
        assert base64.b64decode(src.split(",", 1)[1]).startswith(b"\x89PNG\r\n\x1a\n")


def test_markdown_links_plot_files_and_tables(run_dir):
    md = write_report(run_dir).read_text()
    for stem in ("team_success", "reward", "loss", "kl", "entropy"):
        assert f"(plots/{stem}.png)" in md
        assert (run_dir / "plots" / f"{stem}.png").read_bytes().startswith(b"\x89PNG")
    assert "| team success rate | 0.250 | 0.750 |" in md
    assert "| tool_call_validity/tool_caller | 0.500 | 0.500 |" in md
    assert md.count("\n| 3 | 1.000 | 0.750 | 1.000 |") == 1  # step 3: held-out, on-policy and best-of-K success


def test_episode_rendered_as_conversation_and_escaped(run_dir):
    write_report(run_dir)
    page = (run_dir / "report.html").read_text()
    text = "".join(parse_html(page).text)
    assert "turn 1 · tool_caller" in text and "turn 1 · verifier" in text
    assert "tool_call: 3+4 = 7" in text  # which tool ran with what result
    assert '<tool_call>{"name": "calculator"' in text  # the action's text is shown as text...
    assert "<b>" not in page and "&lt;b&gt;" in page  # ...never as markup


def test_report_opens_with_a_header_naming_model_dtype_spec_commit_and_one_sentence(run_dir):
    md = write_report(run_dir).read_text().splitlines()
    assert md[0] == "# Run report: run (fake)"
    assert md[2] == (
        "**Held-out success rose from 1/4 (0.25) to 3/4 (0.75) over 3 training steps (greedy, on problems training "
        "never draws; 95% intervals [0.00, 0.49] and [0.00, 0.49], overlapping: not a clear change).**"
    )
    header = md[: md.index("## Held-out problems")]
    model = next(line for line in header if line.startswith("- **Model:**"))
    assert "smol = smollm2-135m-instruct" in model and "float32 (auto: this CPU has no bf16 unit)" in model
    assert any(line.startswith("- **Spec:** fake: math_tool_v0 (layout multi)") for line in header)
    assert "- **Commit:** 0123456789ab (pettingllms 0.1.0)" in header
    assert "- **Started:** 2026-12-06 01:00 UTC" in header
    text = "".join(parse_html((run_dir / "report.html").read_text()).text)
    assert "smol = smollm2-135m-instruct, float32" in text and text.index("Held-out success rose") < text.index("Model")


def test_heldout_curve_starts_at_step_0_from_the_before_training_measurement(run_dir):
    rows, spec = read_metrics(run_dir), yaml.safe_load((run_dir / "spec.yaml").read_text())
    before, after = read_eval(run_dir / "eval_before.json"), read_eval(run_dir / "eval_after.json")
    _, points = heldout_points(rows, spec, before, after)
    # Step 0: the untrained team on the first eval_subset (2) held-out problems, test-0 failed and test-1 solved.
    assert [(p.step, p.rate, p.episodes) for p in points] == [(0, 0.5, 2), (3, 1.0, 2)]


def test_run_without_a_curve_draws_held_out_before_and_after(tmp_path):
    spec = json.loads(json.dumps(SPEC))
    del spec["train"]["eval_every"]
    run = make_run(tmp_path / "run", spec)
    rows = [{k: v for k, v in r.items() if not k.startswith("heldout")} for r in read_metrics(run)]
    _, points = heldout_points(rows, spec, read_eval(run / "eval_before.json"), read_eval(run / "eval_after.json"))
    assert [(p.step, p.rate, p.episodes) for p in points] == [(0, 0.25, 4), (3, 0.75, 4)]  # all held-out problems


def test_no_kl_panel_when_kl_was_not_measured(tmp_path):
    spec = json.loads(json.dumps(SPEC))
    spec["algorithm"]["kl_coef"] = 0.0  # KL is not computed: metrics.jsonl's kl/<agent> is a placeholder 0
    run = make_run(tmp_path / "run", spec)
    md = write_report(run).read_text()
    assert "plots/kl.png" not in md and not (run / "plots" / "kl.png").exists()
    assert "KL to the base is not drawn: algorithm.kl_coef is 0" in md
    assert len(parse_html((run / "report.html").read_text()).images) == 4  # team success, reward, loss, entropy


def test_samples_show_the_same_problems_before_and_after_with_a_failure(run_dir):
    md = write_report(run_dir).read_text()
    samples = md[md.index("## Sample episodes") :]
    titles = [line for line in samples.splitlines() if line.startswith("### ")]
    # Fixed by training first, then the one that failed both times; each shown before and after.
    assert titles[:2] == [
        "### test-0: Tom has 3 apples & gets 0 more. (fixed by training)",
        "### test-2: Tom has 3 apples & gets 2 more. (fixed by training)",
    ]
    assert "### test-3: Tom has 3 apples & gets 3 more. (failed before and after)" in titles
    failed = samples[samples.index("### test-3") :]
    assert failed.count("*Before training: not solved*") == 1 and failed.count("*After training: not solved*") == 1
    assert "Answer: 9 <b>" in failed and "tool_call: 3+4 = 7" in failed  # the failed answer, the tool's result
    assert samples.count("*Before training:") == samples.count("*After training:") == len(titles)


def test_old_eval_files_without_transcripts_show_their_few_episodes(tmp_path):
    run = make_run(tmp_path / "run")
    for name in ("eval_before.json", "eval_after.json"):
        ev = json.loads((run / name).read_text())
        ev["per_episode"] = [{k: v for k, v in e.items() if k != "transcript"} for e in ev["per_episode"]]
        (run / name).write_text(json.dumps(ev))
    md = write_report(run).read_text()
    assert "## Sample episodes (held-out, after training)" in md and "(gold answer 7)" in md


def test_report_without_evals_or_metrics_still_writes_both_files(tmp_path):
    run = tmp_path / "empty_run"
    run.mkdir()
    (run / "spec.yaml").write_text("name: fake\n")
    write_report(run)
    assert parse_html((run / "report.html").read_text()).images == []
    assert (run / "report.md").read_text().startswith("# Run report: empty_run")


def test_report_command(run_dir, tmp_path, monkeypatch, capsys):
    assert run_cli(["report", str(run_dir)], monkeypatch) == 0
    assert (run_dir / "report.html").is_file() and (run_dir / "report.md").is_file()
    capsys.readouterr()
    assert run_cli(["report", str(tmp_path / "nowhere")], monkeypatch) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not a run directory" in err


class Sections(HTMLParser):
    """What follows each <h2> up to the next one: the tags and the words in between."""

    def __init__(self):
        super().__init__()
        self.sections: list[dict] = []
        self.links: list[str] = []
        self.in_h2 = False

    def handle_starttag(self, tag, attrs):
        if tag == "h2":
            self.in_h2 = True
            self.sections.append({"title": "", "tags": [], "text": ""})
        elif self.sections and not self.in_h2:
            self.sections[-1]["tags"].append(tag)
        if tag == "a":
            self.links.append(dict(attrs)["href"])

    def handle_endtag(self, tag):
        if tag == "h2":
            self.in_h2 = False

    def handle_data(self, data):
        if self.sections:
            self.sections[-1]["title" if self.in_h2 else "text"] += data.strip()


def test_compare_html_has_no_empty_section_overlays_the_curves_and_links_each_run(tmp_path, monkeypatch):
    from tests.test_compare import write_specs

    solo, team = write_specs(tmp_path)
    out = tmp_path / "out"
    assert run_cli(["compare", str(solo), str(team), "--seeds", "1", "--max-steps", "2", "--out", str(out)], monkeypatch) == 0
    parser = Sections()
    parser.feed((out / "compare.html").read_text())
    titles = [s["title"] for s in parser.sections]
    assert "Held-out curves" in titles and "Each run's report" in titles
    empty = [s["title"] for s in parser.sections if not s["tags"] and not s["text"]]
    assert not empty, f"empty sections: {empty}"
    curves = parser.sections[titles.index("Held-out curves")]
    assert curves["tags"].count("img") == 1
    # One link per run, each to the run's own report, relative to compare.html.
    result = json.loads((out / "compare.json").read_text())
    runs = [Path(r["run_dir"]) for rs in result["runs"].values() for r in rs]
    assert sorted((out / href).resolve() for href in parser.links) == sorted((r / "report.html").resolve() for r in runs)
    md = (out / "compare.md").read_text()
    assert all(f"({Path(href).with_suffix('.md')})" in md for href in parser.links)


def test_compare_curves_start_at_step_0_for_every_arm(tmp_path):
    from pettingllms_cli.analysis.compare_curves import arm_series

    runs = [
        {"run_dir": str(make_run(tmp_path / f"seed{i}", before=before)), "seed": i} for i, before in enumerate([BEFORE, AFTER])
    ]
    x, rates, (lower, upper) = arm_series(runs, "steps")
    # Step 0 over the first 2 held-out problems: seed 0 solved 1 of 2, seed 1 2 of 2; step 3: both 2 of 2.
    assert x == [0, 3] and rates == [0.75, 1.0]
    assert lower[0] < 0.75 < upper[0] and upper[1] == pytest.approx(1.0)  # Wilson over the 4 episodes of both seeds
