"""The problem `play` plays: one held-out problem of a data file, or one built from free text (`--question`).

Free text works where the env's problem is made of what a person can type:
- math_tool_v0: the question alone;
- function_call_v0, function_select_v0: the request and the functions it may call (`--functions FILE`, a JSON list of
  BFCL function schemas), read by the env's own BFCL reader as a one-record data file, so its checks apply;
- sql_v0: a question about the built-in shop database the spec's seed builds (the one its data is asked over).
Any other env needs `--data FILE --index I`. A free-text problem has no reference answer, so nothing the team does
counts as solved: its answer is one nothing matches (`NO_NUMBER`, `NO_CALL`, `None`).
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path

from pettingllms_cli.envs import Problem
from pettingllms_cli.envs.function_call import load_bfcl
from pettingllms_cli.envs.loading import HELD_OUT_SEED, load_split
from pettingllms_cli.errors import UserError
from pettingllms_cli.spec import Experiment

QUESTION_ALONE = {"math_tool_v0"}
WITH_FUNCTIONS = {"function_call_v0", "function_select_v0"}
OVER_DATABASE = {"sql_v0"}
FREE_TEXT_ID = "question"
NO_NUMBER = float("nan")  # math: equal to no number
NO_CALL = [{"": {}}]  # function calls: a ground truth that no call matches (no function is named "")
FUNCTIONS_FORMAT = 'a JSON list of function schemas in BFCL format, e.g. [{"name": "get_weather", "parameters": {...}}]'


def problem_of(
    spec: Experiment, question: str | None, data: str | None, index: int | None, functions: str | None = None
) -> Problem:
    """The problem RUN plays: from `--question` (with `--functions` where the env calls functions) or `--data --index`."""
    if (question is None) == (data is None):
        raise UserError("give one of --question TEXT or --data FILE --index I")
    if data is not None and index is None:
        raise UserError("--data needs --index I (which held-out problem to play, from 0)")
    if functions is not None and question is None:
        raise UserError("--functions goes with --question; a --data record carries its own functions")
    return question_problem(spec, question, functions) if question is not None else data_problem(spec, data, index)


def question_problem(spec: Experiment, text: str, functions: str | None = None) -> Problem:
    """A problem from free text, where the env can build one; otherwise one line naming the input it needs."""
    if not text.strip():
        raise UserError("--question is empty; write the question, e.g. --question 'Tom has 12 apples and buys 7. How many?'")
    env, text = spec.env.name, text.strip()
    if functions is not None and env not in WITH_FUNCTIONS:
        raise UserError(f"--functions: {env} calls no functions; only {' and '.join(sorted(WITH_FUNCTIONS))} take them")
    if env in QUESTION_ALONE:
        return Problem(FREE_TEXT_ID, text, NO_NUMBER)
    if env in WITH_FUNCTIONS:
        if functions is None:
            needs = f"--question: {env} needs the functions the request may call"
            raise UserError(f"{needs}; add --functions FILE ({FUNCTIONS_FORMAT})")
        return functions_problem(text, Path(functions))
    if env in OVER_DATABASE:
        return Problem(FREE_TEXT_ID, text, None, {"db_seed": spec.seed})  # the database the env's data is asked over
    raise UserError(
        f"--question: {env} cannot build a problem from free text (it needs the data's other fields); use --data FILE --index I"
    )


def functions_problem(text: str, file: Path) -> Problem:
    """The request and FILE's functions as the env reads a BFCL record (load_bfcl), with no reference call."""
    functions = read_functions(file)
    with tempfile.TemporaryDirectory(prefix="pettingllms-play-") as tmp:
        questions = Path(tmp) / "request.json"
        record = {"id": FREE_TEXT_ID, "question": [[{"role": "user", "content": text}]], "function": functions}
        questions.write_text(json.dumps(record), encoding="utf-8")
        # load_bfcl wants an answer file naming an offered function; the problem's real answer is NO_CALL
        answer = {"id": FREE_TEXT_ID, "ground_truth": [{str(_name(functions[0])): {}}]}
        questions.with_name("request_answer.json").write_text(json.dumps(answer), encoding="utf-8")
        try:
            (problem,) = load_bfcl(questions)
        except UserError as e:  # the reader names its own temp file and record: name the user's file instead
            raise UserError(f"--functions {file}: {str(e).removeprefix(f'{questions}: record 1: ')}") from None
    return dataclasses.replace(problem, answer=NO_CALL)


def read_functions(file: Path) -> list:
    """FILE's JSON list of function schemas (each checked by the env's reader); one line naming FILE otherwise."""
    try:
        functions = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"--functions {file}: no such file; pass {FUNCTIONS_FORMAT}") from None
    except OSError as e:
        raise UserError(f"--functions {file}: cannot read it ({e.strerror or e})") from None
    except (ValueError, RecursionError) as e:
        why = "nested too deeply" if isinstance(e, RecursionError) else str(e).split(":")[0][:80]
        raise UserError(f"--functions {file}: not valid JSON ({why}); pass {FUNCTIONS_FORMAT}") from None
    if isinstance(functions, dict):
        functions = [functions]  # one schema on its own
    if not isinstance(functions, list) or not functions:
        raise UserError(f"--functions {file}: holds no functions; pass {FUNCTIONS_FORMAT}")
    return functions


def _name(function: object) -> object:
    return function.get("name") if isinstance(function, dict) else None


def data_problem(spec: Experiment, data: str, index: int) -> Problem:
    """The `index`-th (0-based) held-out problem of `data`, in the order `eval --data` scores them."""
    if index < 0:
        raise UserError(f"--index {index}: must be 0 or more")
    problems = load_split(spec.env.name, data, "test", HELD_OUT_SEED, index + 1, spec.env.options)
    return problems[index]
