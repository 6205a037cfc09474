"""`pettingllms play`: one episode of a trained team, deterministic, with every role's action and the outcome."""

from __future__ import annotations

import json

import pytest

from tests.conftest import EXPERIMENTS, FAST, run_cli

QUESTION = "Mia has 30 cards and gives away 4. How many cards are left?"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    out = tmp_path_factory.mktemp("play") / "run"
    sets = [arg for s in [*FAST[:-1], "env.max_turns=2"] for arg in ("--set", s)]
    assert run_cli(["train", str(EXPERIMENTS / "smoke.yaml"), "--out", str(out), "--max-steps", "1", *sets], mp) == 0
    mp.undo()
    return out


def _json(args, monkeypatch, capsys) -> dict:
    assert run_cli(["play", *args, "--json"], monkeypatch) == 0
    return json.loads(capsys.readouterr().out)


def test_play_json_is_deterministic_and_complete(run, monkeypatch, capsys):
    first = _json([str(run), "--question", QUESTION], monkeypatch, capsys)
    again = _json([str(run), "--question", QUESTION], monkeypatch, capsys)
    assert first == again
    roles = [(a["turn"], a["role"], a["agent"]) for a in first["actions"]]
    assert roles[:2] == [(0, "tool_caller", "caller"), (0, "verifier", "verifier")]
    for action in first["actions"]:
        assert action["action"] == action["prefill"] + action["generated"] and action["tokens"] and action["prompt_ids"]
        assert action["env"], "what the env made of the action is missing"
    assert first["actions"][0]["prompt"][-2]["content"] == f"Question: {QUESTION}"
    assert first["outcome"]["success"] is None and first["problem"]["answer"] is None  # free text: no reference
    assert first["decoding"] == "greedy" and first["step"] == 1


def test_play_a_data_problem_has_an_outcome(run, monkeypatch, capsys):
    from pettingllms_cli.analysis.evaluate import eval_problems
    from pettingllms_cli.spec import load_spec

    record = _json([str(run), "--data", "generated", "--index", "2"], monkeypatch, capsys)
    expected = eval_problems(load_spec(run / "spec.yaml"), "test", 0, 3)[2]
    assert record["problem"]["question"] == expected.question and record["problem"]["answer"] == expected.answer
    assert record["outcome"]["success"] in (True, False)


def test_sampling_follows_the_seed(run, monkeypatch, capsys):
    args = [str(run), "--question", QUESTION, "--temperature", "5.0"]
    a, b = (_json([*args, "--seed", s], monkeypatch, capsys) for s in ("1", "1"))
    c = _json([*args, "--seed", "2"], monkeypatch, capsys)
    tokens = [[x["tokens"] for x in r["actions"]] for r in (a, b, c)]
    assert tokens[0] == tokens[1] and tokens[0] != tokens[2]


def test_transcript_shows_prompts_actions_and_outcome(run, monkeypatch, capsys):
    assert run_cli(["play", str(run), "--question", QUESTION, "--prompts"], monkeypatch) == 0
    text = capsys.readouterr().out
    assert "turn 0 · tool_caller" in text and "Write one calculator call" in text and "no reference answer" in text


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["{tmp}", "--question", "x"], "not a run directory"),
        (["{run}", "--checkpoint", "9", "--question", "x"], "no checkpoint step_9"),
        (["{run}"], "give one of --question"),
        (["{run}", "--question", " "], "--question is empty"),
        (["{run}", "--data", "generated"], "--data needs --index"),
        (["{run}", "--data", "{tmp}/missing.jsonl", "--index", "0"], "missing.jsonl"),
        (["{run}", "--question", "x", "--temperature", "0"], "--temperature"),
    ],
)
def test_bad_input_is_one_line_exit_2(run, tmp_path, monkeypatch, capsys, args, says):
    assert run_cli(["play", *[a.format(tmp=tmp_path, run=run) for a in args]], monkeypatch) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err


def test_an_env_without_free_text_problems_says_what_it_needs(smoke_spec):
    from pettingllms_cli.errors import UserError
    from pettingllms_cli.training.play import question_problem

    spec = smoke_spec.model_copy(update={"env": smoke_spec.env.model_copy(update={"name": "sql_v0"})})
    with pytest.raises(UserError, match="--data FILE --index I"):
        question_problem(spec, "How many users?")
