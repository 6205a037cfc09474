"""`function_call_v0`: answer a user request with the right function call (BFCL format).

Layouts:
- `multi`: `planner` names the function to use (`Function: <name>`); `caller` writes the
  `<tool_call>` with the arguments (its reply is prefilled with the planner's choice). The env
  checks the call against the JSON schema and, on a retry, both roles see why it was rejected.
- `single`: `caller` picks the function and fills the arguments in one call.
- `team` (the showcase, envs/review.py): `planner` writes the call; `validator` checks it against
  the function's JSON schema before it runs (`Yes.`, or `No: ` and why, which sends it back
  unrun); `reader` reads the call that ran and its result and replies `Yes.` (hands it in, which
  ends the episode, right or wrong) or `No: ` and why, which sends it back (a verdict is the
  reply's first word, Yes or No: review.verdict). `solo`: one `caller` with the
  same prompt and rounds; a call that fits the schema runs and is handed in, one that does not
  fails and is retried with the error.

Rewards per action: team = the current call matches the ground truth by the rules of BFCL's
Python AST checker (bfcl_rules.py: the function name, every argument the schema requires, no
unknown ones, exact types but an int for a float, array item types, strings compared without
case, spaces and `,./-_*^`, exact numbers); option `scoring: lenient` relaxes three of them
(docs/envs.md). In `team` and `solo` a call that matches is never rejected by the schema check.
Local (named below): planner `PLAN_RIGHT` (1.0) for a correct function,
`PLAN_OTHER` (0.2) for another offered one, `PLAN_NONE` (-0.1) for none; caller `CALL_INVALID`
(-0.1) for an unparseable call or unknown function, else the share of ground-truth arguments it
got right (the `team` planner and the `solo` caller too). `team` judges: `JUDGED_RIGHT` for a
right verdict (a schema-valid call let run, an invalid one sent back; a matching call accepted, a
wrong or failed one sent back), `JUDGED_WRONG` otherwise, `NOTHING_TO_READ` when no call ran.
Solved when the call matches. The planner's team term is the caller's outcome on its
branch (credit.py: `deferred_roles`).

Data: `generated` (a built-in 24-record BFCL `simple_python` sample, Apache-2.0) or a BFCL
question file (JSON lines: `id`, `question`, `function`); answers are read from
`possible_answer/<name>` beside it or `<stem>_answer.json` (`id`, `ground_truth`: per call,
each argument's accepted values, `""` meaning it may be omitted).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field

from pettingllms_cli.envs import bfcl_rules, review
from pettingllms_cli.envs.base import EnvOptions, Message, Outcome, Problem, TurnEnv, read_jsonl, split_records
from pettingllms_cli.errors import UserError
from pettingllms_cli.tools.calls import OPEN, ToolCall, parse_tool_call, render_tool_call, strip_tool_results

DATA_DIR = Path(__file__).parent / "data"
SAMPLE = DATA_DIR / "bfcl_sample.json"
PLAN_PREFIX = "Function: "
CALLER_SYSTEM = "Answer the request with one function call."
PLANNER_SYSTEM = "Name the function that answers the request."
SHOT_USER = "Request: Find the area of a circle with radius 3.\nFunction: circle_area(radius: integer, unit?: string)"
SHOT_CALL = render_tool_call(ToolCall("circle_area", {"radius": 3}))
VERDICT_FORM = 'Reply "Yes." or "No: <why>." (your first word is Yes or No).'  # the one form review.verdict reads
VALIDATOR_SYSTEM = (
    "Check a function call against the function's schema before it runs: only its arguments, every required one, "
    f"each of the right type. {VERDICT_FORM}"
)
READER_SYSTEM = f"Read the call that ran and its result, and say whether it does what the request asks. {VERDICT_FORM}"
VALIDATOR_ASK = 'Does the call fit the function\'s schema? Reply "Yes." or "No: <why>."'  # closes each case
READER_ASK = 'Does the call do what the request asks? Reply "Yes." or "No: <why>."'
_SHOT_FN = "Function: circle_area(radius: integer, unit?: string)"
VALIDATOR_SHOTS = [
    (f"{_SHOT_FN}\nCall: circle_area(radius=3)", "Yes."),
    (f"{_SHOT_FN}\nCall: circle_area(unit='cm')", "No: missing required argument 'radius'."),
]
READER_SHOTS = [
    ("Request: Find the area of a circle with radius 3.\nCall: circle_area(radius=3)\nResult: ran", "Yes."),
    ("Request: Find the area of a circle with radius 5.\nCall: circle_area(radius=3)\nResult: ran", "No: the radius is 5."),
]
# Rewards (see the module docstring): named here, not written into `_act`.
PLAN_RIGHT = 1.0  # planner: a function the ground truth calls
PLAN_OTHER = 0.2  # planner: another offered function (the format is right, the choice is not)
PLAN_NONE = -0.1  # planner: no offered function named
CALL_INVALID = -0.1  # caller: no parseable <tool_call>, or a function that is not offered


# --- matching (pure functions; the rules are in bfcl_rules.py) --------------------------------------
def score_call(call: ToolCall, gold: dict, schema: dict, lenient: bool = False) -> tuple[bool, float, str]:
    """(matches by BFCL's rules, share of ground-truth arguments right, why not) for one call against one gold call.

    >>> fn = {"name": "f", "parameters": {"properties": {"x": {"type": "integer"}, "u": {"type": "string"}}}}
    >>> score_call(ToolCall("f", {"x": 1}), {"f": {"x": [1], "u": ["cm", ""]}}, fn)
    (True, 1.0, '')
    >>> score_call(ToolCall("f", {"x": 1, "u": "cm'"}), {"f": {"x": [1], "u": ["cm", ""]}}, fn)
    (False, 0.5, "argument 'u' has a wrong value")
    """
    name, args = next(iter(gold.items()))
    why = bfcl_rules.call_problem(call.name, call.arguments, gold, schema, lenient)
    if call.name != name:
        return False, 0.0, why or ""
    props = schema.get("parameters", {}).get("properties", {})
    right = sum(
        (key in call.arguments and bfcl_rules.value_matches(call.arguments[key], accepted, props.get(key, {}), lenient))
        or (key not in call.arguments and "" in accepted)
        for key, accepted in args.items()
    )
    return why is None, right / max(1, len(args)), why or ""


def signature(fn: dict) -> str:
    """A compact one-line signature; `?` marks optional arguments.

    >>> signature({"name": "f", "parameters": {"properties": {"x": {"type": "integer"}, "u": {"type": "string"}},
    ...            "required": ["x"]}})
    'f(x: integer, u?: string)'
    """
    params = fn.get("parameters", {})
    required = set(params.get("required", []))
    args = [f"{k}{'' if k in required else '?'}: {v.get('type', 'any')}" for k, v in params.get("properties", {}).items()]
    return f"{fn['name']}({', '.join(args)})"


class FunctionCallOptions(EnvOptions):
    scoring: Literal["bfcl", "lenient"] = Field(
        "bfcl",
        description="How a call is judged right: `bfcl`, BFCL's own rules (the default, what reported figures use), "
        "or `lenient`, which also drops quotes when comparing strings, accepts a float within 1e-9 of the answer "
        "(relative) and an int for a float item of an array (docs/envs.md).",
    )


class FunctionCallEnv(TurnEnv):
    Options = FunctionCallOptions
    name = "function_call_v0"
    layouts = {
        "multi": ("planner", "caller"),
        "single": ("caller",),
        "team": ("planner", "validator", "reader"),
        "solo": ("caller",),
    }
    deferred_roles = frozenset({"planner", "validator"})  # the team reward moves only once the caller (reader) acts

    def _reset_task(self) -> None:
        self.chosen: str | None = None  # the planner's function
        self.correct = False
        self.feedback: str | None = None
        self.pending: list[ToolCall] = []  # `team`: the planner's calls, not run yet
        self.pending_problem: str | None = "no call"  # why they do not fit the schema (None: they do)
        self.pending_right, self.pending_why = False, ""  # do they match the ground truth; what is wrong if not
        self.ran = False  # `team`: the validator let this round's calls run

    @property
    def functions(self) -> list[dict]:
        return self.problem.meta["functions"]

    @property
    def gold(self) -> list[dict]:
        return self.problem.answer

    @property
    def lenient(self) -> bool:
        return self.options.get("scoring", "bfcl") == "lenient"

    # --- observations ---------------------------------------------------------------------
    def observe(self, role: str) -> list[Message]:
        request = f"Request: {self.problem.question}"
        if self.feedback:
            request += f"\n{self.feedback}"
        if role == "validator":
            return review.judge_prompt(VALIDATOR_SYSTEM, VALIDATOR_SHOTS, self._validator_case(), VALIDATOR_ASK)
        if role == "reader":
            return review.judge_prompt(READER_SYSTEM, READER_SHOTS, self._reader_case(), READER_ASK)
        if role == "planner" and self.layout == "multi":
            names = "\n".join(f"- {f['name']}: {f.get('description', '')[:80]}" for f in self.functions)
            return [
                {"role": "system", "content": PLANNER_SYSTEM},
                {"role": "user", "content": f"{request}\nFunctions:\n{names}"},
                {"role": "assistant", "content": PLAN_PREFIX},
            ]
        offered = [f for f in self.functions if f["name"] == self.chosen] or self.functions
        sigs = "\n".join(signature(f) for f in offered)
        prefix = f'{OPEN}{{"name": "{offered[0]["name"]}", "arguments": {{' if len(offered) == 1 else f'{OPEN}{{"name": "'
        return [
            {"role": "system", "content": CALLER_SYSTEM},
            {"role": "user", "content": SHOT_USER},
            {"role": "assistant", "content": SHOT_CALL},
            {"role": "user", "content": f"{request}\nFunction: {sigs}"},
            {"role": "assistant", "content": prefix},
        ]

    # --- actions ----------------------------------------------------------------------------
    def _act(self, role: str, text: str) -> Outcome:
        text = strip_tool_results(text)
        if self.layout in ("team", "solo"):
            return {"planner": self._draft, "validator": self._validate, "reader": self._read}.get(role, self._solo)(text)
        return self._plan(text) if role == "planner" else self._call(text)

    def _plan(self, text: str) -> Outcome:
        body = text.removeprefix(PLAN_PREFIX)
        hits = [(body.find(f["name"]), -len(f["name"]), f["name"]) for f in self.functions if f["name"] in body]
        self.chosen = min(hits)[2] if hits else None
        gold_names = {next(iter(g)) for g in self.gold}
        local = PLAN_NONE if self.chosen is None else PLAN_RIGHT if self.chosen in gold_names else PLAN_OTHER
        return Outcome(local, float(self.correct), info={"function": self.chosen})

    def _call(self, text: str) -> Outcome:
        calls = _parse_calls(text)
        if not calls or isinstance(calls[0], str):
            self.correct = False
            self.feedback = f"Your last call was rejected: {calls[0] if calls else 'no <tool_call> block'}."
            return Outcome(CALL_INVALID, 0.0, info={"tool_error": self.feedback})
        schemas = {f["name"]: f for f in self.functions}
        if any(c.name not in schemas for c in calls if isinstance(c, ToolCall)):
            self.correct = False
            self.feedback = "Your last call used a function that is not offered."
            return Outcome(CALL_INVALID, 0.0, info={"tool_error": "unknown function"})
        self.correct, share, why = _match_all([c for c in calls if isinstance(c, ToolCall)], self.gold, schemas, self.lenient)
        self.feedback = None if self.correct else f"Your last call was wrong: {why}."
        return Outcome(
            share,
            float(self.correct),
            solved=self.correct,
            info={"calls": [c.__dict__ for c in calls if isinstance(c, ToolCall)]},
        )

    # --- the `team` and `solo` layouts (envs/review.py) -------------------------------------------
    def _score(self, text: str) -> tuple[list[ToolCall], str | None, bool, float, str]:
        """(calls, why they do not fit the schema or None, do they match the truth, the caller's local reward, what is wrong)."""
        parsed = _parse_calls(text)
        calls = [c for c in parsed if isinstance(c, ToolCall)]
        problems = [review.schema_problem(c, self.functions) for c in parsed] or ["no <tool_call> block"]
        problem = next((p for p in problems if p is not None), None)
        schemas = {f["name"]: f for f in self.functions}
        if not calls or isinstance(parsed[0], str) or any(c.name not in schemas for c in calls):
            return calls, problem, False, CALL_INVALID, problem or "no call"
        matches, share, why = _match_all(calls, self.gold, schemas, self.lenient)
        problem = None if matches else problem  # the schema check never rejects what BFCL accepts (enum case, listed answers)
        return calls, problem, matches, share, why or (problem or "")

    def _solo(self, text: str) -> Outcome:
        """The lone caller's call runs at once: one that fits the schema is handed in, one that does not fails."""
        calls, problem, matches, local, _ = self._score(text)
        info = {"calls": [c.__dict__ for c in calls]}
        if problem is not None:
            self.feedback = f"Your last call was rejected: {problem}."
            return Outcome(local, 0.0, attempt=bool(calls), info={**info, "tool_error": problem})
        self.handed_in, self.correct = True, matches
        return Outcome(local, float(matches), solved=matches, attempt=True, info=info)

    def _draft(self, text: str) -> Outcome:
        """The planner's calls are kept for the validator; nothing runs yet. Paid as a caller."""
        self.pending, self.pending_problem, self.pending_right, local, self.pending_why = self._score(text)
        self.ran = False
        return Outcome(local, 0.0, attempt=False, info={"calls": [c.__dict__ for c in self.pending]})

    def _validate(self, text: str) -> Outcome:
        """Send the calls back (they do not run; the planner hears the validator's words) or let them run."""
        said = review.verdict(text)
        valid = self.pending_problem is None
        local, due = review.judged(said, valid), {"valid": valid, review.DUE: valid}
        if said is False:
            self.feedback = review.sent_back(self._shown_calls(), "validator", text)
            return Outcome(local, 0.0, attempt=False, info={"verdict": "sent back", **due})
        self.ran = bool(self.pending)
        return Outcome(local, 0.0, attempt=False, info={"verdict": "ran", **due})

    def _read(self, text: str) -> Outcome:
        """Accept the call that ran (hands it in, ends the episode) or send it back; with no decision it stands."""
        if not self.ran:  # sent back or no call: nothing to read, the planner tries again
            return Outcome(review.NOTHING_TO_READ, 0.0, attempt=False, info={"read": "nothing ran"})
        said = review.verdict(text)
        local = review.judged(said, self.pending_right)
        if said is False:
            self.feedback = review.sent_back(self._shown_calls(), "reader", text, self.pending_problem)
            return Outcome(local, 0.0, attempt=True, info={"read": "retry", review.DUE: self.pending_right})
        self.handed_in, self.correct = True, self.pending_right
        info = {"read": "accept", review.DUE: self.pending_right}
        return Outcome(local, float(self.correct), solved=self.correct, attempt=True, info=info)

    def _shown_calls(self) -> str:
        return ", ".join(review.render_args(c) for c in self.pending) or "(no readable call)"

    def _validator_case(self) -> str:
        called = {c.name for c in self.pending}
        fns = [f for f in self.functions if f["name"] in called] or self.functions
        return "\n".join(f"Function: {signature(f)}" for f in fns) + f"\nCall: {self._shown_calls()}"

    def _reader_case(self) -> str:
        shown = self._shown_calls()
        result = "(nothing ran)" if not self.ran else "ran" if self.pending_problem is None else f"error: {self.pending_problem}"
        return f"Request: {self.problem.question}\nCall: {shown}\nResult: {result}"

    # --- reference and corrupted actions ----------------------------------------------------
    def reference_action(self, role: str) -> str:
        if role == "validator":
            problem = self.pending_problem
            return "Yes." if problem is None else f"No: {problem}."
        if role == "reader":
            return "Yes." if self.pending_right else f"No: {self.pending_why}."
        if role == "planner" and self.layout == "multi":
            return PLAN_PREFIX + next(iter(self.gold[0]))
        schemas = {f["name"]: f for f in self.functions}
        calls = [ToolCall(name, _reference_args(args, _required(schemas[name]))) for g in self.gold for name, args in g.items()]
        return "".join(render_tool_call(c) for c in calls)

    def corrupted_actions(self, role: str) -> list[str]:
        """Wrong function and wrong value (for the planner: a function that is not offered)."""
        if role == "planner" and self.layout == "multi":
            return [PLAN_PREFIX + "no_such_function"]
        if role in ("validator", "reader"):
            return []
        name, args = next(iter(self.gold[0].items()))
        good = _reference_args(args, _required({f["name"]: f for f in self.functions}[name]))
        wrong_value = dict(good)
        if good:
            key = next(iter(good))
            wrong_value[key] = _wrong(good[key])
        wrong_fn = render_tool_call(ToolCall(name + "_other", good))
        return [wrong_fn, render_tool_call(ToolCall(name, wrong_value)) if good else wrong_fn]

    # --- data ---------------------------------------------------------------------------------
    @classmethod
    def load_problems(cls, data: str, split: str, seed: int, n: int, options: dict | None = None) -> list[Problem]:
        path = SAMPLE if data == "generated" else Path(data)
        problems = load_bfcl(path)
        return split_records(problems, split, max(1, len(problems) // 5), path)[:n]


def _parse_calls(text: str) -> list[ToolCall | str]:
    """Every `<tool_call>` block in order (a malformed one as its error string)."""
    return [parse_tool_call(text[i:]) for i in [m.start() for m in re.finditer(re.escape(OPEN), text)]]


def _match_all(calls: list[ToolCall], gold: list[dict], schemas: dict, lenient: bool = False) -> tuple[bool, float, str]:
    """Each gold call matched by a distinct model call, in any order; no extra calls."""
    left, shares, why = list(calls), [], ""
    for g in gold:
        scored = [(score_call(c, g, schemas[c.name], lenient), i) for i, c in enumerate(left)]
        if not scored:
            return False, sum(shares) / len(gold), "a call is missing"
        (ok, share, reason), i = max(scored, key=lambda s: (s[0][0], s[0][1]))
        shares.append(share)
        why = why or reason
        if ok:
            left.pop(i)
    matched = not why and not left
    return matched, sum(shares) / len(gold), why or ("too many calls" if left else "")


def _reference_args(args: dict, required: frozenset[str] = frozenset()) -> dict:
    """The first accepted value of each argument; omittable ones whose first option is `""` are left out, unless the
    schema marks them required (BFCL's data has such records): then the first non-empty value.

    >>> _reference_args({"a": [1], "b": ["", 2], "c": [{"k": ["x", "y"]}]})
    {'a': 1, 'c': {'k': 'x'}}
    >>> _reference_args({"a": [1], "b": ["", 2]}, frozenset({"b"}))
    {'a': 1, 'b': 2}
    """
    out = {}
    for key, options in args.items():
        values = [v for v in options if v != ""] if isinstance(options, list) else []
        if values and (options[0] != "" or key in required):
            out[key] = _resolve(values[0])
    return out


def _required(schema: dict) -> frozenset[str]:
    return frozenset(schema.get("parameters", {}).get("required", []))


def _resolve(value: object) -> object:
    """Nested gold dicts hold lists of accepted values too; pick the first at every level."""
    if isinstance(value, dict):
        return _reference_args(value)
    if isinstance(value, list):
        return [_resolve(v) for v in value]
    return value


def _wrong(value: object) -> object:
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 7
    if isinstance(value, str):
        return value + " zzz"
    return "zzz"


# --- BFCL files ----------------------------------------------------------------------------------
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
