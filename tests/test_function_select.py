"""function_select_v0 (issue 28): who sees which signatures, identical worked examples, the splits, BFCL files, bad data."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pettingllms_cli.envs import function_select_data as generated
from pettingllms_cli.envs.checker import ALL, check_env
from pettingllms_cli.envs.function_call import (
    CALL_INVALID,
    PLAN_NONE,
    PLAN_RIGHT,
    FunctionCallEnv,
    load_bfcl,
    signature,
)
from pettingllms_cli.envs.function_select import EXAMPLES, UNSEEN, FunctionSelectEnv
from pettingllms_cli.envs.loading import HELD_OUT_SEED
from pettingllms_cli.errors import UserError
from pettingllms_cli.spec import load_spec
from pettingllms_cli.tools.calls import ToolCall, parse_tool_call, render_tool_call

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "data" / "bfcl_multiple" / "BFCL_v3_multiple.json"  # BFCL's `multiple` layout, our records
EXPERIMENTS = ROOT / "experiments"


def _problem(split: str = "test", i: int = 0):
    return FunctionSelectEnv.load_problems("generated", split, 0, i + 1)[i]


def _signatures_in(messages: list[dict], functions: list[dict]) -> list[str]:
    text = "\n".join(m["content"] for m in messages)
    return [f["name"] for f in functions if signature(f) in text]


def _team_after(choice: str, problem=None) -> FunctionSelectEnv:
    env = FunctionSelectEnv(problem or _problem(), "team", 1)
    env.step("selector", choice)
    return env


def _right(env: FunctionSelectEnv) -> str:
    return next(iter(env.problem.answer[0]))


# --- who sees which signatures -------------------------------------------------------------------
@pytest.mark.parametrize("i", range(6))
def test_filler_sees_one_signature_and_the_lone_caller_all(i):
    problem = _problem(i=i)
    team = _team_after("Function: " + next(iter(problem.answer[0])), problem)
    lone = FunctionSelectEnv(problem, "single", 1)
    assert _signatures_in(team.observe("filler"), problem.meta["functions"]) == [_right(team)]
    assert sorted(_signatures_in(lone.observe("caller"), problem.meta["functions"])) == sorted(
        f["name"] for f in problem.meta["functions"]
    )
    assert len(problem.meta["functions"]) == generated.OFFERED
    assert team.prefill("filler").endswith(f'"name": "{_right(team)}", "arguments": {{"')  # up to the first argument's name


def test_selector_sees_names_and_descriptions_but_no_signature():
    env = FunctionSelectEnv(_problem(), "team", 1)
    text = "\n".join(m["content"] for m in env.observe("selector"))
    assert _signatures_in(env.observe("selector")[1 + len(EXAMPLES) :], env.functions) == []
    assert all(f"- {f['name']}: {f['description']}" in text for f in env.functions)


@pytest.mark.parametrize("reply", ["Function: no_such_function", "Function: ", "I don't know.", "Function: get_weather_now"])
def test_a_selector_naming_nothing_offered_fails_with_its_penalty_and_the_filler_sees_all(reply):
    env = FunctionSelectEnv(_problem(), "team", 1)
    result = env.step("selector", reply)  # never raises
    lone = FunctionSelectEnv(env.problem, "single", 1)
    assert result.local_reward == PLAN_NONE and result.info["failed"] and not result.terminated
    assert env.observe("filler") == lone.observe("caller")  # the fallback is exactly the lone agent's prompt


# --- the same worked examples and the same shaping in both arms ------------------------------------
def _tokenizer():
    from transformers import AutoTokenizer

    from pettingllms_cli.models.loader import resolve

    try:
        return AutoTokenizer.from_pretrained(resolve("smollm2-135m-instruct"))
    except (UserError, OSError) as e:
        pytest.skip(f"SmolLM2's tokenizer is not available here: {e}")


def _message_tokens(tokenizer, messages: list[dict], first: int, last: int) -> list[int]:
    """The token ids of messages `first` to `last` (excluded) of the encoded prompt, by their <|im_start|> marks."""
    from pettingllms_cli.policy.prompts import encode

    ids = encode(tokenizer, messages, None)
    starts = [i for i, t in enumerate(ids) if t == tokenizer.convert_tokens_to_ids("<|im_start|>")]
    return ids[starts[first] : starts[last]]


def test_worked_examples_are_token_identical_in_every_prompt():
    tokenizer = _tokenizer()
    problem = _problem()
    team, lone = _team_after("Function: " + next(iter(problem.answer[0])), problem), FunctionSelectEnv(problem, "single", 1)
    prompts = [team.observe("selector"), team.observe("filler"), lone.observe("caller")]
    shots = [_message_tokens(tokenizer, p, 1, 1 + len(EXAMPLES)) for p in prompts]
    assert shots[0] == shots[1] == shots[2]
    assert "circle_area" in tokenizer.decode(shots[0]) and all(p[1 : 1 + len(EXAMPLES)] == EXAMPLES for p in prompts)


def test_the_lone_caller_earns_the_selectors_term_plus_the_fillers():
    problem = _problem()
    name, args = next(iter(problem.answer[0].items()))
    key = next(iter(args))
    wrong = render_tool_call(ToolCall(name, {k: (v[0] if k != key else "zzz 999") for k, v in args.items()}))
    team = _team_after("Function: " + name, problem)
    selector = team.transcript[-1]
    filler = team.step("filler", wrong)
    lone = FunctionSelectEnv(problem, "single", 1).step("caller", wrong)
    share = (len(args) - 1) / len(args)
    assert filler.local_reward == pytest.approx(share) and lone.local_reward == pytest.approx(PLAN_RIGHT + share)
    assert selector["function"] == name and filler.team_reward == lone.team_reward == 0.0


def test_an_unparseable_or_unoffered_call_is_invalid_in_both_arms():
    for text in ["no call", render_tool_call(ToolCall("no_such_function", {}))]:
        assert _team_after("Function: x").step("filler", text).local_reward == CALL_INVALID
        assert FunctionSelectEnv(_problem(), "single", 1).step("caller", text).local_reward == pytest.approx(
            CALL_INVALID + PLAN_NONE
        )


def test_a_right_call_solves_and_ends_the_episode_in_both_arms():
    problem = _problem()
    team = _team_after("Function: " + next(iter(problem.answer[0])), problem)
    lone = FunctionSelectEnv(problem, "single", 3)
    for env, role in ((team, "filler"), (lone, "caller")):
        result = env.step(role, env.reference_action(role))
        assert result.team_reward == 1.0 and env.success and env.done and env.attempts == 1


# --- the data ---------------------------------------------------------------------------------------
def test_unseen_split_shares_no_function_name_with_training():
    catalogue = generated.catalogue()
    trained = {f["name"] for p in FunctionSelectEnv.load_problems(UNSEEN, "train", 0, 2000) for f in p.meta["functions"]}
    unseen = {f["name"] for p in FunctionSelectEnv.load_problems(UNSEEN, "test", 0, 64) for f in p.meta["functions"]}
    assert trained == {e["name"] for e in catalogue["train"]} and unseen == {e["name"] for e in catalogue["unseen"]}
    assert trained.isdisjoint(unseen) and len(unseen) >= 8


def test_in_catalogue_held_out_requests_never_appear_in_training():
    train = {p.question for p in FunctionSelectEnv.load_problems("generated", "train", 0, 3000)}
    test = FunctionSelectEnv.load_problems("generated", "test", 0, 48)
    assert len(test) == 48 and len({p.question for p in test}) == 48 and train.isdisjoint(p.question for p in test)


def test_catalogue_shape_and_values_appear_in_the_request():
    entries = generated.catalogue()["train"]
    assert len(entries) >= 24 and len({e["domain"] for e in entries}) >= 5
    kinds = {(a["type"], "enum" in a) for e in entries for a in e["parameters"]["properties"].values()}
    assert {("string", False), ("integer", False), ("float", False), ("string", True)} <= kinds
    for p in FunctionSelectEnv.load_problems("generated", "train", 3, 200):
        name, args = next(iter(p.answer[0].items()))
        assert 1 <= len(args) <= 3 and name in [f["name"] for f in p.meta["functions"]]
        assert all(str(v[0]) in p.question for v in args.values())


def test_generated_problems_are_bfcl_records(tmp_path):
    problems = FunctionSelectEnv.load_problems("generated", "test", 0, 8)
    questions, answers = generated.as_bfcl(problems)
    (tmp_path / "possible_answer").mkdir()
    for path, records in ((tmp_path / "q.json", questions), (tmp_path / "possible_answer" / "q.json", answers)):
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert load_bfcl(tmp_path / "q.json") == problems


def test_bfcl_multiple_file_loads_and_its_references_pass_envs_check():
    problems = FunctionSelectEnv.load_problems(str(FIXTURE), "train", 0, ALL) + FunctionSelectEnv.load_problems(
        str(FIXTURE), "test", 0, ALL
    )
    assert len(problems) == 6 and all(len(p.meta["functions"]) >= 2 for p in problems)
    report = check_env(FunctionSelectEnv, data=str(FIXTURE), limit=ALL)
    assert report.ok and report.checked == 6, report.failures
    done = _cli("envs", "check", "function_select_v0", "--data", str(FIXTURE))
    assert done.returncode == 0 and "0 failed" in done.stdout


@pytest.mark.parametrize("data", ["generated", UNSEEN])
def test_env_contract(data):
    report = check_env(FunctionSelectEnv, data=data, limit=4)
    assert report.ok and report.passed > 20, report.failures


# --- bad data: one line naming the record, exit 2 ----------------------------------------------------
def _write(tmp_path: Path, functions: list[dict], gold: list[dict]) -> Path:
    fn = {"name": "f", "parameters": {"properties": {"x": {"type": "integer"}}}}
    q, a = tmp_path / "bad.json", tmp_path / "bad_answer.json"
    rows = [("ok", [fn], [{"f": {"x": [1]}}]), ("broken", functions, gold)]
    q.write_text("".join(json.dumps({"id": i, "question": "Use x 1.", "function": fns}) + "\n" for i, fns, _ in rows))
    a.write_text("".join(json.dumps({"id": i, "ground_truth": g}) + "\n" for i, _, g in rows))
    return q


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pettingllms_cli", *args], capture_output=True, text=True, cwd=ROOT)


@pytest.mark.parametrize(
    ("functions", "gold", "says"),
    [
        ([], [{"f": {"x": [1]}}], "record 2 needs"),
        (
            [{"name": "g", "parameters": {"properties": {"x": {"type": "integer"}}}}],
            [{"f": {"x": [1]}}],
            "'broken' calls a function",
        ),
        (
            [{"name": "f", "parameters": {"properties": {"x": {"type": "integer"}}}}],
            [{"f": {"x": [1]}}, {"f": {"x": [2]}}],
            "'broken' asks for 2 calls",
        ),
    ],
)
def test_bad_record_is_one_line_exit_2(tmp_path, functions, gold, says):
    path = _write(tmp_path, functions, gold)
    with pytest.raises(UserError, match=says):
        FunctionSelectEnv.load_problems(str(path), "train", 0, 5)
    done = _cli("envs", "check", "function_select_v0", "--data", str(path))
    assert done.returncode == 2 and says in done.stderr and len(done.stderr.strip().splitlines()) == 1


# --- the experiments -----------------------------------------------------------------------------------
def test_compare_levels_the_arms_against_the_team():
    from pettingllms_cli.analysis.budget import check_equal_arms, reference_arm

    paths = [EXPERIMENTS / f"showcase_select_{arm}.yaml" for arm in ("single", "team", "team_shared")]
    specs = [load_spec(p) for p in paths]
    check_equal_arms(paths, specs)  # only what defines a team differs
    assert reference_arm(specs) == 1  # the per-agent team's spending in train.steps steps is the others' budget
    assert [s.specialization for s in specs[1:]] == ["per_agent", "shared"]


# --- retries that carry information (issue 28 item 3) ----------------------------------------------------
def _breaking_call(problem) -> tuple[str, str]:
    """A call to the right function with its first argument's value mistyped, and the tool's error for it."""
    name, args = next(iter(problem.answer[0].items()))
    key = next(iter(args))
    bad = {k: (v[0] if k != key else [v[0]]) for k, v in args.items()}  # a list where the schema wants a scalar
    return render_tool_call(ToolCall(name, bad)), f"argument {key!r} must be"


@pytest.mark.parametrize("i", range(4))
def test_a_refused_call_reaches_the_next_attempt_with_the_tools_error_in_both_arms(i):
    problem = _problem(i=i)
    call, error = _breaking_call(problem)
    team = _team_after("Function: " + next(iter(problem.answer[0])), problem)
    team.max_turns = 2
    lone = FunctionSelectEnv(problem, "single", 2)
    refused = [team.step("filler", call), lone.step("caller", call)]
    assert all(error in r.info["tool_error"] and not r.terminated and not r.truncated for r in refused)
    seen = [team.observe("selector"), team.step("selector", "Function: x") and team.observe("filler"), lone.observe("caller")]
    news = [m[-2]["content"] for m in seen]  # the request turn of each role's next prompt
    shown = f"Refused call: {call}\nTool error: {refused[1].info['tool_error']}"
    assert all(shown in text for text in news) and news[1] == news[2]  # the same words; the fallback filler is the lone caller
    assert all(shown not in m["content"] for m in seen[0][: 1 + len(EXAMPLES)])  # the worked examples stay as they were
    for env, role in ((team, "filler"), (lone, "caller")):
        result = env.step(role, env.reference_action(role))
        assert result.team_reward == 1.0 and env.success and env.done and env.attempts == 2  # both calls count


def _fitting_but_wrong(env: FunctionSelectEnv) -> str:
    """A call to the right function whose first argument has another value of the right type (and in its enum)."""
    name, args = next(iter(env.problem.answer[0].items()))
    key, value = next(iter(args)), next(iter(args.values()))[0]
    spec = env.functions[env.names.index(name)]["parameters"]["properties"][key]
    other = next((v for v in spec.get("enum", []) if v != value), None) or (value + 1 if not isinstance(value, str) else "zzz")
    return render_tool_call(ToolCall(name, {k: (v[0] if k != key else other) for k, v in args.items()}))


def test_a_call_that_fits_the_schema_is_handed_in_even_when_wrong_and_one_round_ends_a_refusal():
    problem = _problem()
    lone = FunctionSelectEnv(problem, "single", 2)
    result = lone.step("caller", _fitting_but_wrong(lone))
    assert result.terminated and lone.handed_in and not lone.success and result.info["schema_problem"] is None
    once = FunctionSelectEnv(problem, "single", 1)
    result = once.step("caller", _breaking_call(problem)[0])
    assert result.truncated and not once.handed_in and once.done and result.team_reward == 0.0


# --- held-out sets large enough to separate arms (issue 41) ------------------------------------------------------
@pytest.mark.parametrize("seed", range(3))
def test_the_showcase_held_out_splits_hold_96_problems_disjoint_from_training(seed):
    """Both held-out splits of the selection showcase hold its 96 problems for every compare seed; no held-out
    request is ever a training request, and the unseen split offers no function any training problem offers."""
    spec = load_spec(EXPERIMENTS / "showcase_select_team.yaml", [f"seed={seed}"])
    assert spec.env.eval_problems >= 96
    n = spec.env.eval_problems
    training = FunctionSelectEnv.load_problems("generated", "train", seed, generated.MOST)
    in_catalogue = FunctionSelectEnv.load_problems("generated", "test", HELD_OUT_SEED, n)  # one set for every seed
    unseen = FunctionSelectEnv.load_problems(UNSEEN, "test", HELD_OUT_SEED, n)
    assert len(in_catalogue) == n and len(unseen) == n
    asked = {p.question for p in training}
    for split in (in_catalogue, unseen):
        assert len({p.question for p in split}) == n  # distinct requests: each problem counts once
        assert not asked & {p.question for p in split}
    trained_names = {f["name"] for p in training for f in p.meta["functions"]}
    unseen_names = {f["name"] for p in unseen for f in p.meta["functions"]}
    assert unseen_names and not trained_names & unseen_names
    assert FunctionSelectEnv.load_problems(UNSEEN, "train", seed, 50) == training[:50]  # the same training problems


# --- retries that can be learned: episodes that start at a refused call (issue 41 item 4) --------------------------
def _refused_file(tmp_path, problems) -> Path:
    records = [{"question": p.question, "call": _breaking_call(p)[0]} for p in problems]
    path = tmp_path / "refused.json"
    path.write_text(json.dumps(records))
    return path


@pytest.mark.parametrize("layout", ["team", "single"])
def test_an_episode_can_start_at_a_refused_call_whose_error_every_prompt_shows(tmp_path, layout):
    pool = FunctionSelectEnv.load_problems("generated", "train", 0, 40)
    path = _refused_file(tmp_path, pool[::4])  # 10 of the 40 have a refused first call
    options = {"refused_calls": str(path)}
    problems = FunctionSelectEnv.load_problems("generated", "train", 0, 5, options)
    assert len(problems) == 5 and all(p.question in {q.question for q in pool[::4]} for p in problems)
    problem = problems[0]
    call, error = _breaking_call(problem)
    env = FunctionSelectEnv(problem, layout, 3, options)
    env.reset()
    assert (env.turn, env.attempts_made, env.done) == (1, 1, False)  # the replayed call was attempt 1, round 1
    shown = f"Refused call: {render_tool_call(parse_tool_call(call))}\nTool error:"
    for role in env.roles:
        request = env.observe(role)[-2]["content"]
        assert shown in request and error in request  # the tool's own error text is in the prompt
    if layout == "team":
        env.step("selector", _right(env))
    result = env.step(env.current_role, FunctionCallEnv(problem, "single").reference_action("caller"))
    assert result.terminated and env.success and env.attempts == 2  # solved at the policy's first call: attempt 2
    assert env.transcript[0]["replayed"] and "tool_error" in env.transcript[0]


def test_refused_calls_that_the_tool_accepts_or_no_file_are_one_line(tmp_path):
    problem = FunctionSelectEnv.load_problems("generated", "train", 0, 1)[0]
    right = FunctionCallEnv(problem, "single").reference_action("caller")
    path = tmp_path / "refused.json"
    path.write_text(json.dumps([{"question": problem.question, "call": right}]))
    options = {"refused_calls": str(path)}
    (loaded,) = FunctionSelectEnv.load_problems("generated", "train", 0, 1, options)
    with pytest.raises(UserError, match="not refused by the tool"):
        FunctionSelectEnv(loaded, "single", 3, options).reset()
    with pytest.raises(UserError, match="cannot read"):
        FunctionSelectEnv.load_problems("generated", "train", 0, 1, {"refused_calls": str(tmp_path / "missing.json")})


def test_a_team_trains_on_episodes_that_start_at_a_refused_call(tmp_path):
    """Two tiny training steps of the retry showcase started at refused calls: every held-out and training episode
    begins at attempt 2 with the refusal in its prompts, and nothing the replay adds is counted as the policy's."""
    from unittest import mock

    from rich.console import Console

    from pettingllms_cli.training.loop import train

    problems = [
        *FunctionSelectEnv.load_problems("generated", "train", 0, 200),
        *FunctionSelectEnv.load_problems("generated", "test", HELD_OUT_SEED, 4),
    ]
    path = _refused_file(tmp_path, problems)
    overrides = [
        "train.steps=2", "train.checkpoint_every=2", "env.eval_problems=2", "train.max_new_tokens=6", "env.max_turns=3",
        "models.smol.source=tiny-llama", "train.problems_per_step=2", f"env.options.refused_calls={path}",
        "train.eval_every=1", "train.eval_subset=2",
    ]  # fmt: skip
    spec = load_spec(EXPERIMENTS / "showcase_select_team_retry.yaml", overrides)
    with mock.patch("pettingllms_cli.training.loop.write_report"):
        train(spec, tmp_path / "run", console=Console(quiet=True))
    after = json.loads((tmp_path / "run" / "eval_after.json").read_text())
    for episode in after["per_episode"]:
        assert episode["transcript"][0]["replayed"] and episode["transcript"][0]["role"] == "replayed"
        assert all(not t.get("replayed") for t in episode["transcript"][1:])
        assert len(episode["actions"]) == len(episode["transcript"]) - 1  # the replayed call is not the policy's action
        prompt_error = episode["transcript"][0]["tool_error"]
        assert prompt_error
    assert "tool_call_validity/replayed" not in after
    assert after["solved_at_later_attempt_rate"] == after["team_success_rate"]  # every success came after a refusal
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(r["sampled_actions"] > 0 for r in rows)


@pytest.mark.parametrize("layout", ["single", "team"])
def test_validity_counts_a_call_that_ran_as_valid_and_a_refused_one_as_not(layout):
    """A handed-in call (right or wrong) ran; a call without a readable <tool_call> was refused: validity 1/2."""
    from pettingllms_cli.analysis.evaluate import tool_call_validity

    env = FunctionSelectEnv(_problem(), layout, 2)
    caller = "caller" if layout == "single" else "filler"
    for text in ("I would call the weather tool.", env.reference_action(caller)):
        if layout == "team":
            env.step("selector", env.reference_action("selector"))
        env.step(caller, text)
    assert env.success
    assert tool_call_validity([env.transcript]) == {f"tool_call_validity/{caller}": 0.5}


@pytest.mark.parametrize("name", ["showcase_select_team_refused.yaml"])
def test_the_shipped_refused_calls_start_every_episode_at_a_refusal_and_hold_out_unseen_requests(name):
    """The refused-call showcases' data: every call, train and held out, is one the tool refuses, its error is in every
    role's first prompt, and no held-out request is a training one."""
    from pettingllms_cli.training.loop import load_problems

    spec = load_spec(EXPERIMENTS / name)
    train, held_out = load_problems(spec)
    assert len(held_out) == spec.env.eval_problems and len(train) >= 4 * spec.train.problems_per_step
    assert not {p.question for p in train} & {p.question for p in held_out}
    for problem in [*train, *held_out]:
        env = FunctionSelectEnv(problem, spec.env.layout, spec.env.max_turns, spec.env.options)
        env.reset()  # raises when the tool would accept the call
        error = env.transcript[0]["tool_error"]
        assert env.transcript[0]["replayed"] and env.attempts_made == 1
        assert all(error in env.observe(role)[-2]["content"] for role in env.roles)
