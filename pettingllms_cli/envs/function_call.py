"""`function_call_v0`: answer a user request with the right function call (BFCL format).

Layouts:
- `multi`: `planner` names the function to use (`Function: <name>`); `caller` writes the
  `<tool_call>` with the arguments (its reply is prefilled with the planner's choice). The env
  checks the call against the JSON schema and, on a retry, both roles see why it was rejected.
- `single`: `caller` picks the function and fills the arguments in one call.
- `team` (the showcase, envs/review.py, envs/judging.py): `planner` writes the call; `validator` checks it against
  the function's JSON schema before it runs (`Yes.`, or `No: ` and why, which sends it back
  unrun); `reader` reads the call that ran and its result and replies `Yes.` (hands it in, which
  ends the episode, right or wrong) or `No: ` and why, which sends it back (a verdict is the
  reply's first word, Yes or No: review.verdict). The schema check is the tool: a call that does not
  fit goes back to the planner with its error (`Your last call was rejected: ...`) and is never handed
  in. `solo`: one `caller` with the same prompt and rounds; a call that fits the schema runs and is
  handed in, one that does not fails and is retried with the same error line.

Rewards per action: team = the current call matches the ground truth by the rules of BFCL's
Python AST checker (bfcl_rules.py: the function name, every argument the schema requires, no
unknown ones, exact types but an int for a float, array item types, strings compared without
case, spaces and `,./-_*^`, exact numbers); option `scoring: lenient` relaxes three of them
(docs/envs.md). In `team` and `solo` a call that matches is never rejected by the schema check.
Local (envs/rewards.py): planner `PLAN_RIGHT` (1.0) for a correct function,
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
from pettingllms_cli.envs.base import EnvOptions, Message, Outcome, Problem, split_records
from pettingllms_cli.envs.bfcl_data import load_bfcl
from pettingllms_cli.envs.judging import TEAM, Draft, ReviewedEnv
from pettingllms_cli.envs.rewards import CALL_INVALID, PLAN_NONE, PLAN_OTHER, PLAN_RIGHT
from pettingllms_cli.tools.calls import OPEN, ToolCall, parse_tool_call, render_tool_call, strip_tool_results

DATA_DIR = Path(__file__).parent / "data"
SAMPLE = DATA_DIR / "bfcl_sample.json"
PLAN_PREFIX = "Function: "
CALLER_SYSTEM = "Answer the request with one function call."
PLANNER_SYSTEM = "Name the function that answers the request."
SHOT_USER = "Request: Find the area of a circle with radius 3.\nFunction: circle_area(radius: integer, unit?: string)"
SHOT_CALL = render_tool_call(ToolCall("circle_area", {"radius": 3}))
_SHOT_FN = "Function: circle_area(radius: integer, unit?: string)"
# The judges (envs/review.py). A "No" example's reason names its own function and values, so a judge that copies it
# says nothing false about another call ("missing required argument 'radius'" is false for a function without one).
VALIDATOR = review.Judge(
    "Check a function call against the function's schema before it runs: only its arguments, every required one, "
    "each of the right type.",
    "Does the call fit the function's schema?",
    (
        (f"{_SHOT_FN}\nCall: circle_area(radius=3)", "Yes."),
        (f"{_SHOT_FN}\nCall: circle_area(unit='cm')", "No: circle_area needs radius."),
    ),
)
READER = review.Judge(
    "Read the call that ran and its result, and say whether it does what the request asks.",
    "Does the call do what the request asks?",
    (
        ("Request: Find the area of a circle with radius 3.\nCall: circle_area(radius=3)\nResult: ran", "Yes."),
        (
            "Request: Find the area of a circle with radius 5.\nCall: circle_area(radius=3)\nResult: ran",
            "No: radius=3 is not radius 5.",
        ),
    ),
)


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


class FunctionCallEnv(ReviewedEnv):
    Options = FunctionCallOptions
    name = "function_call_v0"
    layouts = {
        "multi": ("planner", "caller"),
        "single": ("caller",),
        "team": TEAM,
        "solo": ("caller",),
    }
    judges = {"validator": VALIDATOR, "reader": READER}

    def _reset_task(self) -> None:
        super()._reset_task()
        self.chosen: str | None = None  # `multi`: the planner's function
        self.correct = False

    @property
    def functions(self) -> list[dict]:
        return self.problem.meta["functions"]

    @property
    def gold(self) -> list[dict]:
        return self.problem.answer

    @property
    def lenient(self) -> bool:
        return self.opts.scoring == "lenient"

    # --- observations ---------------------------------------------------------------------
    def _prompt(self, role: str) -> list[Message]:
        request = f"Request: {self.problem.question}"
        if self.feedback:
            request += f"\n{self.feedback}"
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

    def _case(self, role: str) -> str:
        if role == "validator":
            called = {c.name for c in self._drafted()}
            fns = [f for f in self.functions if f["name"] in called] or self.functions
            return "\n".join(f"Function: {signature(f)}" for f in fns) + f"\nCall: {self._shown()}"
        result = f"error: {self.refused}" if self.refused else "ran" if self.ran else "(nothing ran)"
        return f"Request: {self.problem.question}\nCall: {self._shown()}\nResult: {result}"

    def _drafted(self) -> list[ToolCall]:
        return [c for c in _parse_calls(self.draft.text) if isinstance(c, ToolCall)] if self.draft else []

    def _shown(self) -> str:
        return self.draft.shown if self.draft else "(no readable call)"

    # --- actions ----------------------------------------------------------------------------
    def _act(self, role: str, text: str) -> Outcome:
        return super()._act(role, strip_tool_results(text))

    def _act_unreviewed(self, role: str, text: str) -> Outcome:
        return self._choose(text) if role == "planner" else self._call(text)

    def _choose(self, text: str) -> Outcome:
        """`multi`: the planner names the function the caller will fill in."""
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
        ran = [c for c in calls if isinstance(c, ToolCall)]  # a malformed block after the first is left out
        self.correct, share, why = _match_all(ran, self.gold, schemas, self.lenient)
        self.feedback = None if self.correct else f"Your last call was wrong: {why}."
        info = {"calls": [c.__dict__ for c in ran], "tool_call": "".join(map(render_tool_call, ran))}  # it ran (validity)
        return Outcome(share, float(self.correct), solved=self.correct, info=info)

    # --- the `team` and `solo` layouts: what envs/judging.py asks of the env ----------------------
    def _check(self, text: str) -> Draft:
        """The calls as written; the schema check is the tool, and it never refuses what BFCL accepts (enum case,
        listed answers). Paid as a caller: `CALL_INVALID`, else the share of ground-truth arguments right."""
        parsed = _parse_calls(text)
        calls = [c for c in parsed if isinstance(c, ToolCall)]
        problems = [review.schema_problem(c, self.functions) for c in parsed] or ["no <tool_call> block"]
        problem = next((p for p in problems if p is not None), None)
        schemas = {f["name"]: f for f in self.functions}
        if not calls or isinstance(parsed[0], str) or any(c.name not in schemas for c in calls):
            right, local, why = False, CALL_INVALID, problem or "no call"
        else:
            right, local, why = _match_all(calls, self.gold, schemas, self.lenient)
            problem = None if right else problem
            why = why or (problem or "")
        shown = ", ".join(review.render_args(c) for c in calls) or "(no readable call)"
        info = {"calls": [c.__dict__ for c in calls]}
        return Draft(text, shown, local, bool(calls), refusal=problem, problem=problem, right=right, why=why, info=info)

    def _run(self, draft: Draft) -> dict:
        return {"tool_call": draft.text} if draft.refusal is None else {"tool_error": draft.refusal}

    def _hand_in(self, draft: Draft) -> dict:
        self.correct = draft.right
        return {}

    def _refusal_line(self, refusal: str) -> str:
        return f"Your last call was rejected: {refusal}."

    # --- reference and corrupted actions ----------------------------------------------------
    def _reference_call(self, role: str) -> str:
        if role == "planner" and self.layout == "multi":
            return PLAN_PREFIX + next(iter(self.gold[0]))
        schemas = {f["name"]: f for f in self.functions}
        calls = [ToolCall(name, _reference_args(args, _required(schemas[name]))) for g in self.gold for name, args in g.items()]
        return "".join(render_tool_call(c) for c in calls)

    def _corrupted_calls(self, role: str) -> list[str]:
        """Wrong function and wrong value (for the planner: a function that is not offered)."""
        if role == "planner" and self.layout == "multi":
            return [PLAN_PREFIX + "no_such_function"]
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
