"""`function_select_v0`: choose the right one of several offered functions, then fill its arguments (BFCL format).

Layouts:
- `team`: `selector` sees the request and the offered functions' names with one-line descriptions and
  writes one name (its reply is prefilled as a call's, `<tool_call>{"name": "`, the worked examples' own
  form: prefilled with `Function: ` the untrained model copied the list, so the first name counted);
  `filler` sees the request and only the chosen function's signature and description, its reply prefilled
  up to the first argument's name (`..., "arguments": {"`: stopped at the `{`, the untrained model wrote
  unquoted keys, `{symbol: "NVDA"}`, in 7 of 15 greedy calls; the lone caller, who has not chosen a
  function when its reply starts, cannot be prefilled that far). If the
  selector names no offered function, the filler sees every offered signature and writes the whole
  call, exactly as the lone agent does.
- `single`: one `caller` sees the request and every offered signature with its description, and writes
  the whole call (prefilled up to the function's name).

Both layouts' prompts hold the same two worked examples, the same chat turns token for token (`EXAMPLES`:
a request, two offered signatures, the call). A call that fits its function's schema runs and is handed in,
right or wrong, which ends the episode. One that breaks it (no readable call, a function not offered, a
missing, unknown or mistyped argument) is refused with the tool's own error: with `max_turns` 2 or more the
next round's prompts, every role's in both layouts, show the refused call and that error in the same words.
Every call is an attempt. Only the first `<tool_call>` of a reply is read.

Rewards per action: team = the call matches the ground truth by BFCL's rules (bfcl_rules.py, through
function_call.score_call; option `scoring: lenient` as in function_call_v0). Local, the same answer-key shaping
in both layouts: the choice of function earns `PLAN_RIGHT` (1.0) for the right one, `PLAN_OTHER` (0.2) for
another offered one and `PLAN_NONE` (-0.1) for none or one that is not offered (a failed action, never a
crash); the call earns the share of ground-truth arguments it got right, or `CALL_INVALID` (-0.1) for no
parseable call or a function that is not offered. The selector earns the first term, the filler the second,
and the lone caller, who does both, their sum. The selector's team term is the filler's outcome on its
branch (credit.py: `deferred_roles`).

Data: `generated` (function_select_data.py: training and held-out requests on a 24-function catalogue),
`generated-unseen` (the same training problems; held out: 12 functions no training problem offers), or a
BFCL question file of the `multiple` (or `simple`) category with its answer file, read by function_call_v0's
`load_bfcl` (a record offering no functions, or whose answer names one it does not offer, is one line, exit 2).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic import Field

from pettingllms_cli.envs import function_select_data as generated
from pettingllms_cli.envs.base import Message, Outcome, Problem, TurnEnv, split_records
from pettingllms_cli.envs.function_call import (
    PLAN_PREFIX,
    FunctionCallEnv,
    FunctionCallOptions,
    load_bfcl,
    score_call,
    signature,
)
from pettingllms_cli.envs.review import schema_problem
from pettingllms_cli.envs.rewards import CALL_INVALID, PLAN_NONE, PLAN_OTHER, PLAN_RIGHT
from pettingllms_cli.errors import UserError
from pettingllms_cli.tools.calls import OPEN, ToolCall, parse_tool_call, render_tool_call, strip_tool_results

UNSEEN = "generated-unseen"
SELECTOR_SYSTEM = "Choose the function that answers the request. Write only its name."
CALLER_SYSTEM = "Answer the request with one function call. Copy the argument values from the request."
SHOTS = (  # the worked examples, the same chat turns in every role's prompt: a request, 2 offered functions, the call
    (
        "Find the area of a circle with radius 3.",
        ["circle_area(radius: integer) - Area of a circle.", "send_sms(phone: string, text: string) - Send a text message."],
        ToolCall("circle_area", {"radius": 3}),
    ),
    (
        "Book a taxi to 12 Oak Street for 2 people.",
        ["play_radio(station: string) - Play a radio station.", "book_taxi(address: string, passengers: integer) - Book a taxi."],
        ToolCall("book_taxi", {"address": "12 Oak Street", "passengers": 2}),
    ),
)
EXAMPLES: list[Message] = [
    message
    for request, offered, call in SHOTS
    for message in (
        {"role": "user", "content": f"Request: {request}\nFunctions:\n" + "\n".join(offered)},
        {"role": "assistant", "content": render_tool_call(call)},
    )
]
NAME_PREFIX = f'{OPEN}{{"name": "'  # the lone caller (and a filler with no choice) writes the name on
_NAME_RE = re.compile(r"[A-Za-z_][\w.]*")


def one_line(text: str, limit: int = 80) -> str:
    """A description's first line, at most `limit` characters.

    >>> one_line("Get the weather.\\nMore detail.")
    'Get the weather.'
    """
    return (text.strip().splitlines() or [""])[0][:limit]


def described(fn: dict) -> str:
    """A function's signature and its one-line description.

    >>> described({"name": "f", "description": "Do f.", "parameters": {"properties": {"x": {"type": "integer"}}}})
    'f(x?: integer) - Do f.'
    """
    return f"{signature(fn)} - {one_line(fn.get('description', ''))}"


def named_function(text: str, names: list[str]) -> str | None:
    """The offered function a selector's reply names: its first word that is an offered name, whole (None if none is).

    >>> names = ["get_weather", "book_hotel"]
    >>> named_function('<tool_call>{"name": "book_hotel", "arguments": {', names), named_function("get_weather_now", names)
    ('book_hotel', None)
    >>> named_function("Function: def get_weather.", names)
    'get_weather'
    """
    words = (w.rstrip(".") for w in _NAME_RE.findall(text.removeprefix(NAME_PREFIX).removeprefix(PLAN_PREFIX)))
    return next((w for w in words if w in names), None)


def choice_term(name: str | None, offered: list[str], right: set[str]) -> float:
    """The answer-key shaping for a choice of function: the selector's local reward, and part of the lone caller's.

    >>> choice_term("a", ["a", "b"], {"a"}), choice_term("b", ["a", "b"], {"a"}), choice_term("z", ["a", "b"], {"a"})
    (1.0, 0.2, -0.1)
    """
    if name not in offered:
        return PLAN_NONE
    return PLAN_RIGHT if name in right else PLAN_OTHER


class FunctionSelectOptions(FunctionCallOptions):
    refused_calls: str | list[str] | None = Field(
        None,
        description="Start every episode at a refused call (retries that can be learned): JSON files (one or a list) written by "
        "`pettingllms eval ... --out FILE` (its episodes whose first call the tool refused) or a list of "
        '{"question", "call"} records. Only problems with such a call are drawn; the call is replayed as the '
        "episode's first attempt, so the prompts of its second round show it and the tool's error, and the "
        "policy's own calls start at attempt 2 (set max_turns to 3 for two of them).",
    )


def refused_first_calls(path: str) -> dict[str, str]:
    """{request: the first call the tool refused} from an eval output (`per_episode` transcripts) or a list of
    {"question", "call"} records; an unreadable file is one line, exit 2.

    >>> import tempfile, os
    >>> episode = {"question": "q", "transcript": [{"role": "selector", "text": "f"},
    ...            {"role": "filler", "text": "bad", "tool_error": "no <tool_call> block"}]}
    >>> with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
    ...     _ = f.write(json.dumps({"per_episode": [episode, {"question": "ok", "transcript": [{"text": "x"}]}]}))
    >>> refused_first_calls(f.name); os.unlink(f.name)
    {'q': 'bad'}
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UserError(
            f"env.options.refused_calls: cannot read {path} ({type(e).__name__}); write it with "
            "`pettingllms eval SPEC --split train --temperature 1 --out FILE`"
        ) from None
    if isinstance(data, dict):  # an eval output: each episode's first call, when the tool refused it
        calls = {}
        for episode in data.get("per_episode", []):
            first = next((t for t in episode.get("transcript", []) if "tool_error" in t or "matches" in t), None)
            if first is not None and "tool_error" in first:
                calls.setdefault(episode["question"], first["text"])
        return calls
    if isinstance(data, list) and all(isinstance(r, dict) and {"question", "call"} <= set(r) for r in data):
        return {r["question"]: r["call"] for r in data}
    raise UserError(f"env.options.refused_calls: {path} is neither an eval output nor a list of {{question, call}} records")


class FunctionSelectEnv(TurnEnv):
    Options = FunctionSelectOptions
    name = "function_select_v0"
    layouts = {"team": ("selector", "filler"), "single": ("caller",)}
    deferred_roles = frozenset({"selector"})  # the team reward moves only once the filler writes the call

    def _reset_task(self) -> None:
        self.chosen: str | None = None  # the selector's function
        self.refusal: str | None = None  # the tool's refusal of the last call, shown in the next round's prompts
        refused = self.problem.meta.get("refused_call")
        if refused is not None:
            self._replay(refused)

    def _replay(self, call: str) -> None:
        """Start at round 2 after `call`, a first call the tool refused: it counts as attempt 1, and every role's
        prompt shows it with the tool's error, as after a refusal the policy made itself. Nothing is sampled for it."""
        outcome = self._call(call, lone=False)
        if "tool_error" not in outcome.info or self.handed_in:
            raise UserError(f"env.options.refused_calls: the call for {self.problem.question!r} is not refused by the tool")
        self.transcript.append({"turn": 0, "role": "replayed", "text": call, "replayed": True, **outcome.info})
        self.attempts_made, self.turn = 1, 1

    @property
    def functions(self) -> list[dict]:
        return self.problem.meta["functions"]

    @property
    def names(self) -> list[str]:
        return [f["name"] for f in self.functions]

    @property
    def right_names(self) -> set[str]:
        return {next(iter(g)) for g in self.problem.answer}

    # --- observations ---------------------------------------------------------------------
    def observe(self, role: str) -> list[Message]:
        if role == "selector":
            listed = "\n".join(f"- {f['name']}: {one_line(f.get('description', ''))}" for f in self.functions)
            return self._prompt(SELECTOR_SYSTEM, f"Functions:\n{listed}", NAME_PREFIX)
        shown = [f for f in self.functions if f["name"] == self.chosen] if role == "filler" else []
        shown = shown or self.functions  # the lone caller, or a filler the selector gave nothing usable
        prefix = f'{NAME_PREFIX}{shown[0]["name"]}", "arguments": {{"' if len(shown) == 1 else NAME_PREFIX
        return self._prompt(CALLER_SYSTEM, "Functions:\n" + "\n".join(described(f) for f in shown), prefix)

    def _prompt(self, system: str, offered: str, prefix: str) -> list[Message]:
        refused = f"\n{self.refusal}" if self.refusal else ""  # the same words in every role's prompt, both arms
        return [
            {"role": "system", "content": system},
            *EXAMPLES,
            {"role": "user", "content": f"Request: {self.problem.question}{refused}\n{offered}"},
            {"role": "assistant", "content": prefix},
        ]

    # --- actions ----------------------------------------------------------------------------
    def _act(self, role: str, text: str) -> Outcome:
        text = strip_tool_results(text)
        return self._select(text) if role == "selector" else self._call(text, lone=role == "caller")

    def _select(self, text: str) -> Outcome:
        """Keep the named function for the filler; a name that is not offered is a failed choice, never an error."""
        self.chosen = named_function(text, self.names)
        local = choice_term(self.chosen, self.names, self.right_names)
        return Outcome(local, 0.0, attempt=False, info={"function": self.chosen, "failed": self.chosen is None})

    def _call(self, text: str, lone: bool) -> Outcome:
        """Score the call by BFCL's rules; the lone caller also earns the choice term of its function.

        A call that fits its function's schema runs and is handed in, right or wrong. One that does not (no
        parseable call, a function not offered, a missing, unknown or mistyped argument) is refused with the
        tool's own error, which the next round's prompts show; on the last round the episode simply ends.
        """
        call = parse_tool_call(text)
        called = call.name if isinstance(call, ToolCall) else None
        problem = schema_problem(call, self.functions)
        info = {"function": called, "schema_problem": problem}
        shaping = choice_term(called, self.names, self.right_names) if lone else 0.0
        if not isinstance(call, ToolCall) or called not in self.names:
            return self._refuse(call, problem, Outcome(CALL_INVALID + shaping, 0.0, attempt=True, info=info))
        gold = next((g for g in self.problem.answer if call.name in g), self.problem.answer[0])
        schema = self.functions[self.names.index(call.name)]
        matches, share, _ = score_call(call, gold, schema, self.opts.scoring == "lenient")
        outcome = Outcome(share + shaping, float(matches), solved=matches, attempt=True, info={**info, "matches": matches})
        if problem is not None and not matches:  # the schema check never refuses what BFCL accepts
            return self._refuse(call, problem, outcome)
        self.handed_in = True
        outcome.info["tool_call"] = render_tool_call(call)  # it ran, right or wrong: a valid call (tool_call_validity)
        return outcome

    def _refuse(self, call: ToolCall | str, problem: str | None, outcome: Outcome) -> Outcome:
        """Keep the tool's error for the next round: the refused call as written, then the error, in both arms."""
        shown = render_tool_call(call) if isinstance(call, ToolCall) else "(no readable call)"
        self.refusal = f"Refused call: {shown}\nTool error: {problem}"
        return Outcome(outcome.local_reward, outcome.team_reward, attempt=True, info={**outcome.info, "tool_error": problem})

    # --- reference and corrupted actions ----------------------------------------------------
    def reference_action(self, role: str) -> str:
        if role == "selector":
            return f'{NAME_PREFIX}{next(iter(self.problem.answer[0]))}"'
        return FunctionCallEnv(self.problem, "single").reference_action("caller")  # the gold call, omittables left out

    def corrupted_actions(self, role: str) -> list[str]:
        """The selector: a function that is not offered; the callers: function_call_v0's wrong function and wrong value."""
        if role == "selector":
            return [f'{NAME_PREFIX}no_such_function"']
        return FunctionCallEnv(self.problem, "single").corrupted_actions("caller")

    # --- data ---------------------------------------------------------------------------------
    @classmethod
    def _starting_at_refusals(cls, data: str, split: str, seed: int, n: int, calls: dict[str, str]) -> list[Problem]:
        """The split's problems that have a refused first call, each carrying it (`meta["refused_call"]`)."""
        pool = cls.load_problems(data, split, seed, generated.MOST if data in ("generated", UNSEEN) else n * 50)
        kept = [p for p in pool if p.question in calls]
        if not kept:
            raise UserError(f"env.options.refused_calls: no {split} problem of {data} has a refused call in the file")
        return [Problem(p.id, p.question, p.answer, {**p.meta, "refused_call": calls[p.question]}) for p in kept[:n]]

    @classmethod
    def load_problems(cls, data: str, split: str, seed: int, n: int, options: dict | None = None) -> list[Problem]:
        refused = (options or {}).get("refused_calls")
        if refused is not None:
            files = [refused] if isinstance(refused, str) else list(refused)
            calls = {q: c for f in files for q, c in refused_first_calls(f).items()}
            return cls._starting_at_refusals(data, split, seed, n, calls)
        if data in ("generated", UNSEEN):
            side = "unseen" if data == UNSEEN and split == "test" else split
            return generated.generate(side, seed, n)
        path = Path(data)
        problems = load_bfcl(path)
        several = next((p for p in problems if len(p.answer) != 1), None)
        if several is not None:  # one call is handed in, so a record asking for several could never be solved
            calls = len(several.answer)
            raise UserError(f"{path}: id {several.id!r} asks for {calls} calls; {cls.name} hands in one (BFCL `multiple`)")
        return split_records(problems, split, max(1, len(problems) // 5), path)[:n]
