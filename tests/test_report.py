"""report.md / report.html from a run directory: plots inlined, valid HTML, episodes as conversations."""

from __future__ import annotations

import base64
import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

from pettingllms_cli.analysis.report import write_report
from tests.conftest import run_cli

VOID = {"meta", "img", "br", "hr", "link", "input"}


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


def fake_eval(success: float, transcripts: list[dict]) -> dict:
    return {
        "team_success_rate": success,
        "team_success_ci": [0.0, 0.49],
        "successes": int(success * 4),
        "mean_attempts_to_success": 2.0 - success,
        "mean_turns": 1.5,
        "episodes": 4,
        "reward/caller": 0.1,
        "tool_call_validity/tool_caller": 0.5,
        "tokens_generated": 100,
        "seconds": 1.0,
        "transcripts": transcripts,
    }


EPISODE = {
    "env": "math_tool_v0",
    "problem": {"id": "test-0", "question": "Tom has 3 apples & gets 4 more.", "answer": 7},
    "success": True,
    "transcript": [
        {
            "turn": 0,
            "role": "tool_caller",
            "text": '<tool_call>{"name": "calculator", "arguments": {"expression": "3+4"}}</tool_call>',
            "tool_call": "3+4 = 7",
        },
        {"turn": 0, "role": "verifier", "text": "Answer: 7 <b>", "answer": 7.0},
    ],
}


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "spec.yaml").write_text("name: fake\n")
    rows = []
    for step in (1, 2, 3):
        row = {
            "step": step,
            "team_success_rate": step / 4,
            "best_branch_success_rate": step / 3,
            **({"heldout_success_rate": 0.5} if step == 3 else {}),  # train.eval_every: 3
            "tokens_per_second": 10.0,
            "seconds": 2.0,
            "tokens_generated": 50,
        }
        for agent in ("caller", "verifier"):
            row |= {
                f"reward/{agent}": 0.1 * step,
                f"loss/{agent}": 1.0 / step,
                f"kl/{agent}": 0.01 * step,
                f"entropy/{agent}": 3.0 - step / 10,
            }
        rows.append(row)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "eval_before.json").write_text(json.dumps(fake_eval(0.25, [])))
    (run / "eval_after.json").write_text(json.dumps(fake_eval(0.75, [EPISODE])))
    return run


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
    assert md.count("\n| 3 | 0.500 | 0.750 | 1.000 |") == 1  # step 3: held-out, on-policy and best-of-K success


def test_episode_rendered_as_conversation_and_escaped(run_dir):
    write_report(run_dir)
    page = (run_dir / "report.html").read_text()
    text = "".join(parse_html(page).text)
    assert "turn 1 · tool_caller" in text and "turn 1 · verifier" in text
    assert "tool_call: 3+4 = 7" in text  # which tool ran with what result
    assert '<tool_call>{"name": "calculator"' in text  # the action's text is shown as text...
    assert "<b>" not in page and "&lt;b&gt;" in page  # ...never as markup
    assert "gold answer 7; solved" in text


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
