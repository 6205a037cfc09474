"""`pettingllms play`: one episode of a trained team, deterministic, with every role's action and the outcome."""

from __future__ import annotations

import json
from pathlib import Path

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


@pytest.mark.parametrize("env", ["plan_path_v0", "sokoban_v0", "code_v0"])
def test_an_env_without_free_text_problems_says_what_it_needs(smoke_spec, env):
    from pettingllms_cli.errors import UserError
    from pettingllms_cli.training.play_problem import question_problem

    spec = smoke_spec.model_copy(update={"env": smoke_spec.env.model_copy(update={"name": env})})
    with pytest.raises(UserError, match=f"--question: {env} cannot build a problem from free text.*--data FILE --index I"):
        question_problem(spec, "Go to the goal.")


# --- function calls (--functions) and SQL over the built-in database ------------------------------------------------
FUNCTIONS = [
    {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {"type": "dict", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
    {
        "name": "send_sms",
        "description": "Send a text message.",
        "parameters": {"type": "dict", "properties": {"phone": {"type": "string"}, "text": {"type": "string"}}},
    },
]
REQUEST = "What is the weather in Paris right now?"


def _train(tmp_path_factory, smoke: dict, env: dict, agents: dict) -> Path:
    """A 1-step tiny-model run of `env`, its agents on the smoke spec's tiny base."""
    import yaml

    root = tmp_path_factory.mktemp(env["name"])
    tree = {**smoke, "name": env["name"], "env": {"data": "generated", "max_turns": 1, "eval_problems": 1, **env}}
    tree["agents"] = {name: {"model": "tiny", "roles": roles, "lora": {"r": 4, "alpha": 8}} for name, roles in agents.items()}
    (root / "spec.yaml").write_text(yaml.safe_dump(tree))
    sets = [arg for s in FAST[:-1] for arg in ("--set", s)]
    mp = pytest.MonkeyPatch()
    assert run_cli(["train", str(root / "spec.yaml"), "--out", str(root / "run"), "--max-steps", "1", *sets], mp) == 0
    mp.undo()
    return root / "run"


@pytest.fixture(scope="module")
def smoke() -> dict:
    import yaml

    return yaml.safe_load((EXPERIMENTS / "smoke.yaml").read_text())


@pytest.fixture(scope="module")
def select_run(tmp_path_factory, smoke):
    env = {"name": "function_select_v0", "layout": "team"}
    return _train(tmp_path_factory, smoke, env, {"sel": ["selector"], "fill": ["filler"]})


@pytest.fixture(scope="module")
def call_run(tmp_path_factory, smoke):
    env = {"name": "function_call_v0", "layout": "multi"}
    return _train(tmp_path_factory, smoke, env, {"plan": ["planner"], "call": ["caller"]})


@pytest.fixture(scope="module")
def sql_run(tmp_path_factory, smoke):
    env = {"name": "sql_v0", "layout": "multi", "max_turns": 2}
    return _train(tmp_path_factory, smoke, env, {"writer": ["query_writer"], "reporter": ["reporter"]})


@pytest.fixture
def functions_file(tmp_path) -> Path:
    path = tmp_path / "functions.json"
    path.write_text(json.dumps(FUNCTIONS))
    return path


def script(monkeypatch, says: dict[str, str]) -> None:
    """Each agent generates the text `says` gives it (through its own tokenizer), so the env's tools see a known action."""
    import torch

    from pettingllms_cli.policy.adapters import Team

    def sample_mixed(self, agents, prompts, k, max_new_tokens, temperature, greedy=False, seeds=None):
        encode = lambda a: torch.tensor(self.tokenizer_of(a).encode(says[a], add_special_tokens=False))  # noqa: E731
        return [[encode(a) for _ in range(k)] for a in agents]

    monkeypatch.setattr(Team, "sample_mixed", sample_mixed)


def test_a_function_request_plays_with_the_functions_file(select_run, functions_file, monkeypatch, capsys):
    args = [str(select_run), "--question", REQUEST, "--functions", str(functions_file)]
    first, again = (_json(args, monkeypatch, capsys) for _ in range(2))  # the tiny model's own actions
    assert first == again and [a["role"] for a in first["actions"]] == ["selector", "filler"]
    assert first["problem"] == {"id": "question", "question": REQUEST, "answer": None, "functions": ["get_weather", "send_sms"]}
    assert "get_weather: Current weather in a city." in first["actions"][0]["prompt"][-2]["content"]
    assert first["outcome"]["success"] is None and first["outcome"]["reference"] == "none (a free-text question)"

    script(monkeypatch, {"sel": "get_weather", "fill": 'city": "Paris"}}</tool_call>'})
    record = _json(args, monkeypatch, capsys)
    selector, filler = record["actions"]
    assert selector["env"] == {"function": "get_weather", "failed": False}
    assert "get_weather(city: string)" in filler["prompt"][-2]["content"]
    assert "send_sms" not in filler["prompt"][-2]["content"]  # the filler sees only the chosen function
    assert filler["action"] == '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    assert filler["env"] == {"function": "get_weather", "schema_problem": None, "tool_call": filler["action"]}  # the call ran
    assert "matches" not in filler["env"]  # there is no reference to match
    assert record["outcome"]["success"] is None


def test_a_function_call_team_shows_the_call_and_says_no_reference(call_run, functions_file, monkeypatch, capsys):
    script(monkeypatch, {"plan": "send_sms", "call": '"phone": "555", "text": "hi"}}</tool_call>'})
    args = [str(call_run), "--question", "Text 555 hi", "--functions", str(functions_file)]
    record = _json(args, monkeypatch, capsys)
    planner, caller = record["actions"]
    assert planner["env"] == {"function": "send_sms"}
    assert caller["prefill"] == '<tool_call>{"name": "send_sms", "arguments": {'
    sent = {"name": "send_sms", "arguments": {"phone": "555", "text": "hi"}}
    assert caller["env"] == {"calls": [sent], "tool_call": caller["action"]}  # it ran
    assert run_cli(["play", *args], monkeypatch) == 0
    text = capsys.readouterr().out
    assert "functions: get_weather, send_sms" in text and "'phone': '555'" in text
    assert "function_call_v0 step 1, greedy: Text 555 hi" in text  # as written: no highlighter's touch
    assert "no reference answer to check in 1 turn(s); reference: none (a free-text question)\n" in text  # one line


def test_a_sql_question_runs_against_the_built_in_database(sql_run, monkeypatch, capsys):
    from pettingllms_cli.envs.sql_query import build_db
    from pettingllms_cli.tools.sql import run_query

    script(monkeypatch, {"writer": "COUNT(*) FROM customers WHERE city = 'Oslo'\"}}</tool_call>", "reporter": "3"})
    record = _json([str(sql_run), "--question", "How many customers live in Oslo?"], monkeypatch, capsys)
    query = "SELECT COUNT(*) FROM customers WHERE city = 'Oslo'"
    writer, reporter = record["actions"][:2]
    result = run_query(build_db(0), query)  # the seed-0 database the run's spec builds
    assert writer["env"] == {"query": query, "rows": 1, "result": result.render()}
    assert result.ok and f"Result: {result.render()}" in reporter["prompt"][-2]["content"]
    assert reporter["env"] == {"answer": "3"}
    assert record["outcome"]["success"] is None and record["problem"]["answer"] is None
    assert len(record["actions"]) == 4  # no reference ends it early: the team plays both rounds


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--question", REQUEST], "add --functions FILE (a JSON list of function schemas in BFCL format"),
        (["--question", REQUEST, "--functions", "{tmp}/none.json"], "none.json: no such file"),
        (["--question", REQUEST, "--functions", "{tmp}/bad.json"], "bad.json: not valid JSON"),
        (["--question", REQUEST, "--functions", "{tmp}/empty.json"], "empty.json: holds no functions"),
        (["--question", REQUEST, "--functions", "{tmp}/nameless.json"], "nameless.json: `function[0]` needs a string `name`"),
        (["--question", REQUEST, "--functions", "{tmp}/params.json"], "params.json: `function[1]`: `parameters` must be"),
        (["--data", "generated", "--index", "0", "--functions", "{tmp}/none.json"], "--functions goes with --question"),
    ],
)
def test_a_bad_functions_input_is_one_line_exit_2(call_run, tmp_path, monkeypatch, capsys, args, says):
    (tmp_path / "bad.json").write_text("[{")
    (tmp_path / "empty.json").write_text("[]")
    (tmp_path / "nameless.json").write_text(json.dumps([{"description": "no name"}]))
    (tmp_path / "params.json").write_text(json.dumps([FUNCTIONS[0], {"name": "f", "parameters": []}]))
    assert run_cli(["play", str(call_run), *[a.format(tmp=tmp_path) for a in args]], monkeypatch) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err


def test_functions_for_an_env_that_calls_none_is_one_line(run, functions_file, monkeypatch, capsys):
    assert run_cli(["play", str(run), "--question", QUESTION, "--functions", str(functions_file)], monkeypatch) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--functions: math_tool_v0 calls no functions" in err[0], err
