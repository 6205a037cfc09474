"""The turns of the `team` and `solo` layouts, written once for math_tool_v0 and function_call_v0.

`team`: the `planner` writes a call (`_plan`), the `validator` lets it go to the tool or sends it
back (`_validate`), the `reader` hands the result in or sends the call back (`_read`). `solo`: one
agent's call goes to the tool at once and its result is handed in (`_solo`). What each judge is
told, how a reply is read and what a send-back says are envs/review.py.

Both arms hear the same facts. A call the tool refuses is never handed in: it goes back to its
writer with `_refusal_line`, the same line in both arms, whoever let it through. A call the
validator rightly sent back because the tool would refuse it comes back with that same line
after the validator's words, because the lone agent would have heard it for the same call.

This module is the one home of that protocol for both envs: the judges' turns, their prompts' dispatch
(`judges`, `_case`), their reference verdicts and the roles whose team term is deferred. An env supplies
its two judges' words (`judges`: envs/review.py `Judge`s) and the case each reads (`_case`), `_check` (a
call as written, checked against the tool and the answer key but not run), `_run` (run it, the action's
info), `_hand_in` (make its result the team's answer), `_refusal_line`, and for its other layouts and roles
`_prompt`, `_act_unreviewed` and `_reference_call`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from pettingllms_cli.envs import review
from pettingllms_cli.envs.base import Outcome, TurnEnv
from pettingllms_cli.envs.messages import Message
from pettingllms_cli.envs.rewards import NOTHING_TO_READ

TEAM = ("planner", "validator", "reader")  # the `team` layout's roles in turn order
JUDGES = ("validator", "reader")  # the `team` roles that judge the planner's call
REVIEWED = ("team", "solo")  # the layouts whose turns this module runs


@dataclass(frozen=True)
class Draft:
    """A call as the planner (or the lone agent) wrote it: checked, not run."""

    text: str  # the action as written
    shown: str  # the call as a send-back names it
    local: float  # its writer's local reward (paid as a caller: well-formed or not, the share it got right)
    reaches_tool: bool  # it parses as a call, so letting it through is an attempt (docs/metrics.md)
    refusal: str | None  # the tool's own error when it refuses the call; None when it runs
    problem: str | None  # why the validator should send it back (a refusal or a bad parameter); None: valid
    right: bool  # run and handed in, it solves the problem
    why: str = ""  # what is wrong with it by the answer key (reference replies only, never shown to the team)
    info: dict = field(default_factory=dict)  # the writer's transcript entry


class ReviewedEnv(TurnEnv):
    """A TurnEnv with the `team` and `solo` layouts; `_review_step` is their `_act`."""

    # The `team` planner and validator: the team reward moves only once the reader hands the call in (rollout/credit.py).
    # The one declaration for both envs (function_call_v0's `multi` planner, whose caller writes its call, too).
    deferred_roles = frozenset(TEAM[:-1])
    judges: ClassVar[dict[str, review.Judge]]  # what the validator and the reader are told, in the env's own words

    # --- the protocol's entry points: judges here, every other role the env's own -----------------------
    def observe(self, role: str) -> list[Message]:
        if role in JUDGES:
            return self.judges[role].prompt(self._case(role))
        return self._prompt(role)

    def _act(self, role: str, text: str) -> Outcome:
        return self._review_step(role, text) if self.layout in REVIEWED else self._act_unreviewed(role, text)

    def reference_action(self, role: str) -> str:
        return reference_verdict(role, self.draft) if role in JUDGES else self._reference_call(role)

    def corrupted_actions(self, role: str) -> list[str]:
        return [] if role in JUDGES else self._corrupted_calls(role)

    def _reset_task(self) -> None:
        self.feedback: str | None = None  # what the next call's writer is told about the previous round
        self.draft: Draft | None = None  # `team`: the planner's call of this round
        self.ran = False  # `team`: the validator let this round's call go to the tool
        self.refused: str | None = None  # `team`: the tool's error for the call it let through

    # --- what the env supplies --------------------------------------------------------------------
    def _case(self, role: str) -> str:
        """What judge `role` reads: the question and the call (validator) or its result (reader)."""
        raise NotImplementedError

    def _prompt(self, role: str) -> list[Message]:
        """`observe` of a role that is not a judge."""
        raise NotImplementedError

    def _act_unreviewed(self, role: str, text: str) -> Outcome:
        """`_act` in the env's other layouts (`multi`, `single`)."""
        raise NotImplementedError

    def _reference_call(self, role: str) -> str:
        """`reference_action` of a role that is not a judge."""
        raise NotImplementedError

    def _corrupted_calls(self, role: str) -> list[str]:
        """`corrupted_actions` of a role that is not a judge (a judge has none: any verdict is an action it may take)."""
        return []

    def _check(self, text: str) -> Draft:
        raise NotImplementedError

    def _run(self, draft: Draft) -> dict:
        """Send the call to the tool (it may refuse it): `{"tool_call": the call that ran}` or `{"tool_error": why
        not}`, nothing else, in every env (tool_call_validity counts the first)."""
        raise NotImplementedError

    def _hand_in(self, draft: Draft) -> dict:
        """Make the call's result the team's answer; info to log with it."""
        raise NotImplementedError

    def _refusal_line(self, refusal: str) -> str:
        """What a call's writer hears after the tool refused it: the same line in both arms."""
        raise NotImplementedError

    def _read_shown(self) -> str:
        """The call as the reader's send-back names it (an env may show it with its result)."""
        return self.draft.shown if self.draft else "(no call)"

    # --- the turns -----------------------------------------------------------------------------------
    def _review_step(self, role: str, text: str) -> Outcome:
        return {"planner": self._plan, "validator": self._validate, "reader": self._read}.get(role, self._solo)(text)

    def _solo(self, text: str) -> Outcome:
        """The lone agent's call goes to the tool at once: its result is the answer handed in, unless refused."""
        draft = self._check(text)
        info = {**draft.info, **self._run(draft)}
        if draft.refusal is not None:
            self.feedback = self._refusal_line(draft.refusal)
            return Outcome(draft.local, 0.0, attempt=draft.reaches_tool, info=info)
        self.handed_in = True
        info = {**info, **self._hand_in(draft)}
        return Outcome(draft.local, float(draft.right), solved=draft.right, attempt=True, info=info)

    def _plan(self, text: str) -> Outcome:
        """The planner's call is kept for the validator; nothing runs yet."""
        self.draft, self.ran, self.refused = self._check(text), False, None
        return Outcome(self.draft.local, 0.0, attempt=False, info=self.draft.info)

    def _validate(self, text: str) -> Outcome:
        """Send the call back unrun (the planner hears the validator's words) or let it go to the tool."""
        draft = self.draft or self._check("")
        said = review.verdict(text)
        valid = draft.problem is None
        local, due = review.judged(said, valid), {"valid": valid, review.DUE: valid}
        if said is False:
            refusal = None if draft.refusal is None else self._refusal_line(draft.refusal)
            self.feedback = review.sent_back(draft.shown, "validator", text, refusal)
            return Outcome(local, 0.0, attempt=False, info={"verdict": "sent back", **due})
        self.ran = draft.reaches_tool
        ran = self._run(draft)  # tool_call, or the tool's tool_error
        if draft.refusal is not None:  # the tool refused it: back to the planner with the tool's error
            self.refused, self.feedback = draft.refusal, self._refusal_line(draft.refusal)
        return Outcome(local, 0.0, attempt=False, info={"verdict": "ran", **ran, **due})

    def _read(self, text: str) -> Outcome:
        """Hand the result in (ends the episode) or send the call back; with no verdict the result stands."""
        draft = self.draft
        if draft is None or self.refused is not None or not self.ran:  # nothing came back to read
            went = self.ran and self.refused is not None  # a refused call went to the tool: an attempt
            return Outcome(NOTHING_TO_READ, 0.0, attempt=went, info={"read": "refused" if went else "nothing ran"})
        said = review.verdict(text)
        local = review.judged(said, draft.right)
        if said is False:
            self.feedback = review.sent_back(self._read_shown(), "reader", text)
            return Outcome(local, 0.0, attempt=True, info={"read": "retry", review.DUE: draft.right})
        self.handed_in = True
        info = {"read": "accept", review.DUE: draft.right, **self._hand_in(draft)}
        return Outcome(local, float(draft.right), solved=draft.right, attempt=True, info=info)


def reference_verdict(role: str, draft: Draft | None) -> str:
    """A right verdict on this round's call (what `envs check` replays): the validator's on whether it may run, the
    reader's on whether its result is right."""
    if draft is None:
        return "Yes."
    if role == "validator":
        return "Yes." if draft.problem is None else f"No: {draft.problem}."
    return "Yes." if draft.right else f"No: {draft.why}."
