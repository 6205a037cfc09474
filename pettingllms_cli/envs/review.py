"""The judge protocol of the `team` layouts (math_tool_v0, function_call_v0): the division of labour of issue 15.

A `planner` analyses the request and writes the call; a `validator` checks its parameters before
anything runs and either lets it run or sends it back; a `reader` reads the result and either
accepts it (the team hands in its answer, which ends the episode) or sends the call back for
another round. The turns themselves are envs/judging.py; this module holds what a judge is told
(`Judge`), how its reply is read (`verdict`), how it is paid (`judged`) and what the planner hears
(`sent_back`).

Both arms hear the same facts. A call sent back comes with the judge's own words, never with what
the answer key says is wrong: the team knows only what its members say. When the tool would have
refused the call, the planner also hears the tool's own error, word for word what the lone agent
hears after its call was refused; a call the validator lets through and the tool refuses goes
back to the planner with that error, as the lone agent's does, and is never handed in. The
matching `solo` layouts give one agent the same request and the same rounds: its call runs at
once and its result is the answer it hands in, unless the tool refused the call (then it tries
again with the tool's error).

Each role's no-op (the empty action) is the team without that role: no call (planner), the call
runs unchecked (validator), the result stands as the answer (reader); `credit: difference`
compares with it. The judges are paid for a correct judgement, never for a verdict as such
(`judged`): approving a valid call and sending back an invalid one earn `JUDGED_RIGHT`; a
rubber-stamped invalid call or a valid one sent back earn `JUDGED_WRONG`. A verdict has one form: the
reply's first word is `Yes` or `No`, alone or followed by punctuation ("Yes.", "No: 8 is not 30 or
4."), as the worked examples show. Anything else ("No problem, it is right.", "Nothing wrong
here", "I am not sure.") is no verdict: the call goes on unchecked (never a send-back) and the judge
earns `NO_VERDICT`. A worked example's reason speaks only of its own example (its numbers, its
function), never of "the question" or "the call": a judge that copies it word for word then says
nothing false about the case in front of it.
Each judged action's info holds the verdict the facts called for under `DUE` (True: approve or
accept), so `reward.balance_verdicts` can credit a judge as if both verdicts were due equally often.

An attempt (docs/metrics.md) is a call that went to the tool: a `solo` call that parsed, a `team`
call the validator let through (counted on the reader's action, which reads its result or hears
that it was refused). A call sent back before it ran is not an attempt: that is what the validator saves.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pettingllms_cli.envs.base import DUE  # noqa: F401  (the judges' info key; judging.py reads it from here)
from pettingllms_cli.envs.messages import Message
from pettingllms_cli.envs.rewards import JUDGED_RIGHT, JUDGED_WRONG, NO_VERDICT
from pettingllms_cli.tools.calls import ToolCall

REPLY_FORM = 'Reply "Yes." or "No: <why>."'  # closes each case
VERDICT_FORM = f"{REPLY_FORM} (your first word is Yes or No)."  # the one form `verdict` reads, told in the system prompt
REASON_CHARS = 160  # how much of a judge's reply the planner hears when its call is sent back
# The verdict form: the reply opens with Yes or No (any case, after spaces, quotes or markdown emphasis), then
# ends or goes on with punctuation. "No problem", "Not bad" and "Nothing wrong" are not verdicts.
_VERDICT_RE = re.compile(r"""^[\s"'*_`]*(yes|no)(?:$|[\s"'*_`]*[.,:;!?\-])""", re.IGNORECASE)
_TYPES: dict[str, tuple[type, ...]] = {
    "integer": (int,),
    "number": (int, float),
    "float": (int, float),
    "string": (str,),
    "boolean": (bool,),
    "array": (list,),
    "tuple": (list,),
    "dict": (dict,),
    "object": (dict,),
}


def verdict(text: str) -> bool | None:
    """A judge's verdict: True (let it run / accept), False (send it back), None (no verdict: it goes on unchecked).

    Only the fixed form counts: a first word Yes or No, alone or followed by punctuation.

    >>> verdict("Yes."), verdict("No: 8 is not in the question."), verdict("**No**, it adds the cups"), verdict("yes")
    (True, False, False, True)
    >>> verdict("No problem, it is right."), verdict("Nothing wrong here"), verdict("Not bad, yes"), verdict("I am not sure.")
    (None, None, None, None)
    """
    match = _VERDICT_RE.match(text)
    return None if match is None else match.group(1).lower() == "yes"


def judged(said: bool | None, truth: bool) -> float:
    """A judge's local reward: right when its yes/no matches the truth; no verdict earns `NO_VERDICT`.

    >>> judged(True, True), judged(False, False), judged(True, False), judged(None, True)
    (1.0, 1.0, 0.0, 0.0)
    """
    if said is None:
        return NO_VERDICT
    return JUDGED_RIGHT if said == truth else JUDGED_WRONG


def sent_back(call: str, judge: str, reply: str, refusal: str | None = None) -> str:
    """What the planner hears when a judge sent its call back: the judge's own words, never the answer key, and
    when the tool would have refused the call, `refusal`: the line the lone agent hears after the same call.

    >>> sent_back("12+9", "validator", "No: 9 is not 12 or 7.")
    'Your call 12+9 was sent back by the validator, who said: "No: 9 is not 12 or 7." Try again.'
    >>> sent_back("12/0", "validator", "No.", "Your last call failed (division by zero). Try again.")
    'Your call 12/0 was sent back by the validator, who said: "No." Your last call failed (division by zero). Try again.'
    """
    said = " ".join(reply.split())[:REASON_CHARS] or "nothing"
    return f'Your call {call} was sent back by the {judge}, who said: "{said}" {refusal or "Try again."}'


def schema_problem(call: ToolCall | str, functions: list[dict]) -> str | None:
    """Why a call does not fit its function's JSON schema (None when it does): what the validator checks.

    >>> fn = {"name": "area", "parameters": {"properties": {"r": {"type": "integer"}}, "required": ["r"]}}
    >>> schema_problem(ToolCall("area", {"r": 3}), [fn]), schema_problem(ToolCall("area", {}), [fn])
    (None, "missing required argument 'r'")
    >>> schema_problem(ToolCall("area", {"r": "3"}), [fn])
    "argument 'r' must be integer"
    """
    if isinstance(call, str):
        return call
    fn = next((f for f in functions if f.get("name") == call.name), None)
    if fn is None:
        return f"function {call.name!r} is not offered"
    params = fn.get("parameters", {})
    props = params.get("properties", {})
    unknown = [k for k in call.arguments if k not in props]
    if unknown:
        return f"unknown argument {unknown[0]!r}"
    missing = [k for k in params.get("required", []) if k not in call.arguments]
    if missing:
        return f"missing required argument {missing[0]!r}"
    for key, value in call.arguments.items():
        kind, allowed = props[key].get("type"), props[key].get("enum")
        types = _TYPES.get(kind) if isinstance(kind, str) else None  # a list of types (JSON schema) is not checked
        if types and (not isinstance(value, types) or (isinstance(value, bool) and bool not in types)):
            return f"argument {key!r} must be {kind}"
        if isinstance(allowed, list) and value not in allowed:
            return f"argument {key!r} must be one of {allowed}"
    return None


@dataclass(frozen=True)
class Judge:
    """What one judge is told: its task, the yes/no question that closes each case, and worked examples, one per
    verdict (a 135M model copies the format from them). The reply is not prefilled: its first word is the verdict."""

    task: str
    question: str
    shots: tuple[tuple[str, str], ...]  # (case, reply): a "Yes." and a "No: <reason about its own example>."

    @property
    def system(self) -> str:
        return f"{self.task} {VERDICT_FORM}"

    @property
    def ask(self) -> str:
        return f"{self.question} {REPLY_FORM}"

    def prompt(self, case: str) -> list[Message]:
        messages: list[Message] = [{"role": "system", "content": self.system}]
        for example, reply in self.shots:
            messages += [{"role": "user", "content": f"{example}\n{self.ask}"}, {"role": "assistant", "content": reply}]
        return messages + [{"role": "user", "content": f"{case}\n{self.ask}"}]


def render_args(call: ToolCall) -> str:
    """A call as the reader sees it.

    >>> render_args(ToolCall("area", {"r": 3, "unit": "cm"}))
    "area(r=3, unit='cm')"
    """
    return f"{call.name}({', '.join(f'{k}={v!r}' for k, v in call.arguments.items())})"
