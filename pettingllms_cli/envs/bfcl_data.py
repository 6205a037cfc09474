"""BFCL question files as `function_call_v0` reads them: the questions, their answer file beside them, and checks
that turn a malformed record into one line naming it (`UserError`)."""

from __future__ import annotations

from pathlib import Path

from pettingllms_cli.envs.base import Problem, read_jsonl
from pettingllms_cli.errors import UserError


def answer_path(question_file: Path) -> Path:
    """`possible_answer/<name>` beside the question file, else `<stem>_answer.json`."""
    beside = question_file.parent / "possible_answer" / question_file.name
    if beside.is_file():
        return beside
    stem = question_file.with_name(f"{question_file.stem}_answer{question_file.suffix or '.json'}")
    if stem.is_file():
        return stem
    raise UserError(f"{question_file}: no answer file; expected {beside} or {stem} (BFCL `ground_truth` records)")


def load_bfcl(path: Path) -> list[Problem]:
    questions = read_jsonl(path)
    apath = answer_path(path)
    answers = {str(a.get("id")): a for a in read_jsonl(apath)}
    problems = []
    for i, rec in enumerate(questions, 1):
        if not isinstance(rec.get("function"), list) or "question" not in rec or not rec["function"]:
            raise UserError(f"{path}: record {i} needs `id`, `question` and a non-empty `function` list (BFCL format)")
        if not isinstance(rec["question"], (str, list)):
            kind = type(rec["question"]).__name__
            raise UserError(f"{path}: record {i}: `question` must be a string or a list of messages, not {kind}")
        for j, fn in enumerate(rec["function"]):
            _check_function(fn, f"{path}: record {i}: `function[{j}]`")
        rid = str(rec.get("id", i))
        gold = answers.get(rid, {}).get("ground_truth")
        if not _valid_gold(gold):
            raise UserError(f"{apath}: no valid `ground_truth` for id {rid!r} (question record {i} of {path})")
        names = {f.get("name") for f in rec["function"] if isinstance(f, dict)}
        if any(next(iter(g)) not in names for g in gold):
            raise UserError(f"{apath}: ground truth for id {rid!r} calls a function that record {i} does not define")
        _check_gold_arguments(gold, rec["function"], f"{apath}: ground truth for id {rid!r}")
        question = _question_text(rec["question"])
        if not question.strip():
            raise UserError(f"{path}: record {i}: `question` holds no user message")
        problems.append(Problem(rid, question, gold, {"functions": rec["function"]}))
    return problems


def _check_function(fn: object, where: str) -> None:
    """A BFCL function schema the env can read: a string `name`, `parameters` with a `properties` object of
    objects and a `required` list of strings (both may be missing); a UserError naming the field otherwise."""
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise UserError(f"{where} needs a string `name`")
    if not isinstance(fn.get("description", ""), str):
        raise UserError(f"{where}: `description` must be a string")
    params = fn.get("parameters", {})
    if not isinstance(params, dict):
        raise UserError(f"{where}: `parameters` must be an object, not {type(params).__name__}")
    props, required = params.get("properties", {}), params.get("required", [])
    if not isinstance(props, dict) or not all(isinstance(v, dict) for v in props.values()):
        raise UserError(f"{where}: `parameters.properties` must be an object of argument schemas")
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise UserError(f"{where}: `parameters.required` must be a list of argument names")


def _check_gold_arguments(gold: list[dict], functions: list[dict], where: str) -> None:
    """Every ground-truth argument is declared by its function (else no call could ever match) and lists accepted values."""
    schemas = {f["name"]: f for f in functions}
    for g in gold:
        name, args = next(iter(g.items()))
        props = schemas[name].get("parameters", {}).get("properties", {})
        for key, accepted in args.items():
            if key not in props:
                raise UserError(f"{where}: argument {key!r} of {name!r} is not in its `parameters.properties`")
            if not isinstance(accepted, list):
                raise UserError(f"{where}: argument {key!r} of {name!r} must list its accepted values")


def _valid_gold(gold: object) -> bool:
    return (
        isinstance(gold, list)
        and bool(gold)
        and all(isinstance(g, dict) and len(g) == 1 and isinstance(next(iter(g.values())), dict) for g in gold)
    )


def _question_text(question: object) -> str:
    """The user text of a BFCL question (a string, a list of messages, or a list of turns)."""
    if isinstance(question, str):
        return question
    flat = [m for turn in question for m in (turn if isinstance(turn, list) else [turn])]
    return "\n".join(str(m.get("content", "")) for m in flat if isinstance(m, dict) and m.get("role", "user") == "user")
