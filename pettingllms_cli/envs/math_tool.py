"""`math_tool_v0`: arithmetic word problems solved with a calculator tool.

Layouts:
- `multi`: `tool_caller` writes a calculator call; `verifier` reads the result and either states
  the final answer (`Answer: <number>`) or rejects the result (`Answer: retry`), which sends the
  caller back for another round when `max_turns` allows.
- `single`: `solver` writes the calculator call and its result is the team's answer.
- `team` (the showcase, envs/review.py, envs/judging.py): `planner` writes the call; `validator` checks it before it
  runs (a well-formed expression whose numbers all come from the question) and replies `Yes.`, or
  `No: ` and why, which sends it back unrun; `reader` reads the calculator's result and replies
  `Yes.` (the result is handed in as the answer, which ends the episode, right or wrong) or `No: `
  and why, which sends the call back. A call the calculator refuses goes back to the planner with the
  calculator's error, never to the reader. A judge's verdict is its reply's first word, Yes or No, alone
  or followed by punctuation (review.verdict); each judge is told that form. `solo`: one `solver` with the same prompt
  and rounds; its call runs at once and its result is the answer it hands in, unless the
  calculator refused the call. A refused call's writer hears the same line in both arms (`retry_feedback`).

Rewards per action: team = the team's current answer is correct by GSM8K's official rule
(envs/gsm8k_rules.py): the answer as written, commas removed, equals the reference string exactly (the text
after the record's `#### `), so `18.0`, `18.`, `$18` fail for `18` and no tolerance lets a wrong integer pass.
The verifier's answer is the number its reply marks: after `#### ` if the reply has one (a worked solution's
marked answer, never its first number), else the number right after `Answer: `; a calculator result is the
answer as the calculator shows it (`format_number`). Option `scoring: lenient` also accepts a leading `$`, one
trailing `.` and the same decimal value with other zeros (docs/envs.md). Local (envs/rewards.py):
callers `CALL_RAN` (+0.1) for a well-formed call that ran, `CALL_FAILED` (-0.1) otherwise; the
verifier is paid for a correct judgement, never for copying (`judgement_reward`): `JUDGED_RIGHT`
(1.0) for a right final answer (accepting a right result, or correcting a wrong one) or for
`retry` when the calculator's result is wrong or missing; `JUDGED_WRONG` (0.0) for a wrong answer
(a copied wrong result included), `retry` on a right result, or neither a number nor `retry`.
In `team`, the validator earns `JUDGED_RIGHT` for approving a valid
call or sending back an invalid one and `JUDGED_WRONG` otherwise (no verdict included); the
reader likewise for accepting a right result or sending back a wrong one, and `NOTHING_TO_READ`
when no result came back; the planner is paid as a caller. A call is invalid when the calculator refuses
it or it uses a number the question does not contain (unless it computes the answer). An episode
ends when the answer is correct, when a `team`/`solo` answer is handed in, or after `max_turns`
rounds. A retry is told what went
wrong (`retry_feedback`): the call failed and why, its result was wrong, or the call was right and
the verifier rejected it or answered something else. Option `format_bonus` (default 0) adds that
much local reward to any action containing a number: format shaping for untrained models.

Options: `ops` (default "+-*/"), the operations generated problems use; the caller's prompt
shows one worked example per op. `scoring` (`official`, the default, or `lenient`): the answer rule above.

Data: `generated` (seeded templates, envs/math_problems.py; test problems use a fixed fifth of all expressions, which
training never draws), or GSM8K-format jsonl (`question`, `answer` ending in
`#### N`); the last fifth of a file's records (at least 1) is the held-out split.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from pydantic import Field

from pettingllms_cli.envs import gsm8k_rules, review
from pettingllms_cli.envs.base import EnvOptions, Message, Outcome, Problem, read_jsonl, split_records
from pettingllms_cli.envs.gsm8k_rules import LENIENT_NUMBER, OFFICIAL_NUMBER, Scoring, answer_is_right, marked_answer
from pettingllms_cli.envs.judging import TEAM, Draft, ReviewedEnv
from pettingllms_cli.envs.math_problems import OPS, generate_problems
from pettingllms_cli.envs.rewards import CALL_FAILED, CALL_RAN, JUDGED_RIGHT, JUDGED_WRONG
from pettingllms_cli.errors import UserError
from pettingllms_cli.tools.calculator import CalculatorError, calculate, format_number
from pettingllms_cli.tools.calls import ToolCall, parse_tool_call, render_tool_call

CALL_PREFIX = '<tool_call>{"name": "calculator", "arguments": {"expression": "'
ANSWER_PREFIX = "Answer: "
RETRY = "retry"  # the verifier's rejection of the calculator's result
_RETRY_RE = re.compile(rf"\b{RETRY}\b", re.IGNORECASE)
_DIGIT_RE = re.compile(r"\d")
_NUMBER_RE = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_DECIMAL_RE = re.compile(r"-?\d+(?:\.\d+)?")

CALLER_SYSTEM = "Write one calculator call whose result answers the question."
VERIFIER_SYSTEM = (
    "Check the calculator result. Give the final answer as a number in digits only (18, not 18.0, $18 or 18.), "
    f"or reply {RETRY} if the result is wrong."
)
_ANN, _JOE = (
    "Question: Ann has 12 pens and buys 7 more. How many pens does Ann have?",
    "Question: Joe had 30 cups and broke 4. How many cups are left?",
)
# The judges (envs/review.py). A "No" example's reason speaks only of its own numbers ("8 is not 30 or 4"), so a
# judge that copies it says nothing false about another question: "8 is not in the question" was copied for
# questions that hold an 8.
VALIDATOR = review.Judge(
    "Check a calculator call before it runs: a well-formed expression that uses only the question's numbers.",
    "Does the call use only the question's numbers?",
    ((f"{_ANN}\nCall: 12+7", "Yes."), (f"{_JOE}\nCall: 30-8", "No: 8 is not 30 or 4.")),
)
READER = review.Judge(
    "Read the calculator result and say whether it answers the question.",
    "Does the result answer the question?",
    ((f"{_ANN}\nCalculator: 12+7 = 19", "Yes."), (f"{_JOE}\nCalculator: 30+4 = 34", "No: Joe broke 4 cups, so 30+4 is wrong.")),
)
# One worked example per operation; the prompt shows those of the ops in use.
SHOTS = {
    "+": ("Ann has 12 pens and buys 7 more. How many pens does Ann have?", "12+7"),
    "-": ("Joe had 30 cups and broke 4. How many cups are left?", "30-4"),
    "*": ("A box holds 6 eggs. How many eggs are in 4 boxes?", "4*6"),
    "/": ("Kim splits 18 nuts equally among 3 kids. How many nuts does each kid get?", "18/3"),
}


def parse_number(text: str) -> float | None:
    match = _NUMBER_RE.search(text)
    if not match:
        return None
    try:
        value = float(match.group().replace(",", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None  # 400 nines are a float infinity, not an answer


def gold_answer(problem: Problem) -> str:
    """The reference answer as the official rule compares it: a GSM8K record's text after `#### ` (commas removed),
    or a generated problem's value as the calculator shows it."""
    return problem.meta.get("gold") or format_number(problem.answer)


def judgement_reward(answer_right: bool, rejected: bool, result_right: bool) -> float:
    """The verifier's local reward: right when it accepts a right result (or corrects a wrong one) or rejects a wrong one.

    >>> judgement_reward(True, False, True), judgement_reward(False, False, False)  # accept right / copy wrong
    (1.0, 0.0)
    >>> judgement_reward(False, True, False), judgement_reward(False, True, True)  # reject wrong / reject right
    (1.0, 0.0)
    """
    if rejected:
        return JUDGED_WRONG if result_right else JUDGED_RIGHT
    return JUDGED_RIGHT if answer_right else JUDGED_WRONG


def parameter_problem(expression: str, question: str, computes_answer: bool) -> str | None:
    """Why a calculator call's parameters are invalid (what the validator checks), or None. Numbers compare exactly.

    >>> q = "Ann has 1,200 pens and buys 7 more."
    >>> parameter_problem("1200+7", q, True), parameter_problem("1200+9", q, False), parameter_problem("1201+7", q, False)
    (None, 'it uses 9, which is not in the question', 'it uses 1201, which is not in the question')
    """
    if computes_answer:
        return None  # a call that computes the answer is valid whatever constants it uses
    given = {parse_number(n) for n in _NUMBER_RE.findall(question)}
    for number in re.findall(r"\d+(?:\.\d+)?", expression):
        if float(number) not in given:
            return f"it uses {number}, which is not in the question"
    return None


def retry_feedback(call: str | None, error: str | None, call_right: bool, answer: str | None = None) -> str:
    """What a caller's retry is told about the last round: what actually went wrong.

    >>> retry_feedback(None, "unknown tool 'x'", False)
    "Your last call failed (unknown tool 'x'). Try again."
    >>> retry_feedback("1+1 = 2", None, False)
    'Your last call 1+1 = 2 was wrong: its result does not answer the question. Try again.'
    >>> retry_feedback("12+7 = 19", None, True)
    'Your last call 12+7 = 19 was right, but the verifier rejected it. Make the call again.'
    >>> retry_feedback("12+7 = 19", None, True, "5")
    'Your last call 12+7 = 19 was right, but the final answer given was 5. Make the call again.'
    """
    if call is None:
        return f"Your last call failed ({error or 'no valid call'}). Try again."
    if not call_right:
        return f"Your last call {call} was wrong: its result does not answer the question. Try again."
    verdict = "the verifier rejected it" if answer is None else f"the final answer given was {answer}"
    return f"Your last call {call} was right, but {verdict}. Make the call again."


class MathOptions(EnvOptions):
    ops: str = Field(OPS, min_length=1, description="Operators the generated problems (and the few-shot examples) use.")
    format_bonus: float = Field(
        0.0, description="Local reward added to any action that contains a digit: format shaping for untrained models."
    )
    scoring: Scoring = Field(
        "official",
        description="How an answer is judged right: `official`, GSM8K's rule (the default, what reported figures use: "
        "the answer as written, commas removed, equals the text after the record's `#### `), or `lenient`, which also "
        "accepts a leading `$`, one trailing `.` and the same decimal value with other zeros (`18.0`) (docs/envs.md).",
    )


class MathToolEnv(ReviewedEnv):
    Options = MathOptions
    name = "math_tool_v0"
    layouts = {
        "multi": ("tool_caller", "verifier"),
        "single": ("solver",),
        "team": TEAM,
        "solo": ("solver",),
    }
    judges = {"validator": VALIDATOR, "reader": READER}

    def _reset_task(self) -> None:
        super()._reset_task()
        self.last_call: str | None = None  # "expr = result" of the latest calculator call
        self.last_value: float | None = None
        self.last_error: str | None = None  # why the latest call failed
        self.answer: str | None = None  # the team's final answer as written (a calculator result as it shows it)

    # --- observations ---------------------------------------------------------------------
    def _case(self, role: str) -> str:
        question = f"Question: {self.problem.question}"
        if role == "validator":
            pending = self.draft.text if self.draft else ""
            shown = self._expression(pending) or f"(unreadable) {pending[:120]}"
            return f"{question}\nCall: {shown}"
        result = f"error ({self.refused})" if self.refused else self.last_call if self.ran else "(nothing ran)"
        return f"{question}\nCalculator: {result}"

    def _prompt(self, role: str) -> list[Message]:
        question = f"Question: {self.problem.question}"
        if role in ("tool_caller", "solver", "planner"):
            messages: list[Message] = [{"role": "system", "content": CALLER_SYSTEM}]
            for q, expr in (SHOTS[op] for op in self.opts.ops):
                call = render_tool_call(ToolCall("calculator", {"expression": expr}))
                messages += [{"role": "user", "content": f"Question: {q}"}, {"role": "assistant", "content": call}]
            content = question if self.feedback is None else f"{question}\n{self.feedback}"
            return messages + [{"role": "user", "content": content}, {"role": "assistant", "content": CALL_PREFIX}]
        calc = f"Calculator: {self.last_call}" if self.last_call else "Calculator: (no result)"
        return [
            {"role": "system", "content": VERIFIER_SYSTEM},
            {"role": "user", "content": f"{question}\n{calc}"},
            {"role": "assistant", "content": ANSWER_PREFIX},
        ]

    # --- actions ----------------------------------------------------------------------------
    def _act(self, role: str, text: str) -> Outcome:
        outcome = super()._act(role, text)
        if _DIGIT_RE.search(text):
            outcome.local_reward += self.opts.format_bonus
        return outcome

    def _act_unreviewed(self, role: str, text: str) -> Outcome:
        """`multi` (caller, verifier) and `single` (solver)."""
        outcome = self._verify(text) if role == "verifier" else self._call(text)
        if role == "solver":
            self.answer = self._shown_result()
            outcome.solved = outcome.team_reward > 0
            if not outcome.solved:
                self.feedback = retry_feedback(self.last_call, self.last_error, False)
        return outcome

    def _call(self, text: str) -> Outcome:
        expression, value, self.last_error = run_calculator(text)
        self.last_call, self.last_value = None, None if value is None else float(value)
        if value is None:
            info = {"tool_error": self.last_error} if expression is None else {"expression": expression[:200]}
            return Outcome(CALL_FAILED, 0.0, info={"tool_error": self.last_error, **info})
        self.last_call = f"{expression} = {format_number(value)}"
        return Outcome(CALL_RAN, float(self._result_right()), info={"tool_call": self.last_call})

    def _verify(self, text: str) -> Outcome:
        self.answer = marked_answer(text, LENIENT_NUMBER if self.scoring == "lenient" else OFFICIAL_NUMBER)
        rejected = self.answer is None and bool(_RETRY_RE.search(text))
        correct = gsm8k_rules.reply_is_right(text, self.gold, self.scoring)
        if not correct:
            self.feedback = retry_feedback(self.last_call, self.last_error, self._result_right(), self.answer)
        local = judgement_reward(correct, rejected, self._result_right())
        return Outcome(local, float(correct), solved=correct, info={"answer": self.answer, "rejected": rejected})

    # --- the `team` and `solo` layouts: what envs/judging.py asks of the env ----------------------
    def _check(self, text: str) -> Draft:
        """A calculator call as written: invalid when the calculator refuses it or it uses a number the question lacks."""
        expression, value, error = run_calculator(text)
        right = value is not None and answer_is_right(format_number(float(value)), self.gold, self.scoring)
        problem = error if value is None else parameter_problem(str(expression), self.problem.question, right)
        return Draft(
            text,
            self._expression(text) or "(unreadable)",
            CALL_FAILED if value is None else CALL_RAN,
            reaches_tool=not isinstance(parse_tool_call(text), str),
            refusal=error,
            problem=problem,
            right=right,
            why="it does not answer the question",
            info={"planned": self._expression(text)},
        )

    def _run(self, draft: Draft) -> dict:
        self._call(draft.text)
        return {"tool_call": self.last_call} if self.last_call is not None else {"tool_error": self.last_error}

    def _hand_in(self, draft: Draft) -> dict:
        self.answer = self._shown_result()  # the result is the answer handed in
        return {"answer": self.answer}

    def _refusal_line(self, refusal: str) -> str:
        return retry_feedback(None, refusal, False)

    def _read_shown(self) -> str:
        return self.last_call or super()._read_shown()

    @staticmethod
    def _expression(text: str | None) -> str | None:
        call = parse_tool_call(text or "")
        if isinstance(call, str) or call.name != "calculator":
            return None
        return str(call.arguments.get("expression", ""))[:200]

    @property
    def gold(self) -> str:
        return gold_answer(self.problem)

    @property
    def scoring(self) -> Scoring:
        return self.opts.scoring

    def _shown_result(self) -> str | None:
        """The latest calculator result as the team reads it (and hands it in), or None when no call ran."""
        return None if self.last_value is None else format_number(self.last_value)

    def _result_right(self) -> bool:
        return answer_is_right(self._shown_result(), self.gold, self.scoring)

    # --- data ---------------------------------------------------------------------------------
    @classmethod
    def load_problems(cls, data: str, split: str, seed: int, n: int, options: dict | None = None) -> list[Problem]:
        if data == "generated":
            # Train and test come from different seed streams; the held-out set never changes with steps.
            stream = seed * 2 + (1 if split == "test" else 0)
            ops = cls.Options.model_validate(options or {}).ops
            return generate_problems(stream, n, f"{split}-", ops, held_out=split == "test")
        path = Path(data)
        records = read_jsonl(path)
        problems = []
        for i, rec in enumerate(records, 1):
            if not isinstance(rec.get("question"), str) or "answer" not in rec:
                raise _bad_record(path, i, "needs a string `question` and an `answer` (GSM8K format)")
            gold = gsm8k_rules.reference_answer(rec["answer"])
            value = _gold_value(gold)
            if value is None:
                raise _bad_record(path, i, "`answer` has no final number after `#### ` (GSM8K's `#### 18`)")
            problems.append(Problem(f"{path.stem}-{i}", rec["question"], value, {"gold": gold}))
        return split_records(problems, split, max(1, len(problems) // 5), path)[:n]

    def _reference_call(self, role: str) -> str:
        """A correct action for `role` now (from the data's answer)."""
        if role == "verifier":
            return ANSWER_PREFIX + self.gold
        expression = self.problem.meta.get("expression", self.gold)
        return render_tool_call(ToolCall("calculator", {"expression": expression}))


def run_calculator(text: str) -> tuple[str | None, float | None, str | None]:
    """(expression, value, error) of an action: what the calculator returns for its call (as `calculate` returns it),
    or why it refuses it.

    >>> run_calculator('<tool_call>{"name": "calculator", "arguments": {"expression": "12/0"}}</tool_call>')
    ('12/0', None, 'division by zero')
    """
    call = parse_tool_call(text)
    if isinstance(call, str):
        return None, None, call
    if call.name != "calculator":
        return None, None, f"unknown tool {call.name!r}"
    expression = call.arguments.get("expression")
    try:
        return str(expression), calculate(expression), None
    except CalculatorError as e:
        return str(expression), None, str(e)


def _gold_value(gold: str | None) -> float | None:
    """A reference answer's value when it is a plain finite decimal, the only kind a calculator result can show."""
    return parse_number(gold) if gold is not None and _DECIMAL_RE.fullmatch(gold) else None


def _bad_record(path: Path, line: int, why: str) -> UserError:
    return UserError(f"{path}: record {line} {why}")
