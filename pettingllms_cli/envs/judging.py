"""The turns of the `team` and `solo` layouts, written once for math_tool_v0 and function_call_v0.

`team`: the `planner` writes a call (`_plan`), the `validator` lets it go to the tool or sends it
back (`_validate`), the `reader` hands the result in or sends the call back (`_read`). `solo`: one
agent's call goes to the tool at once and its result is handed in (`_solo`). What each judge is
told, how a reply is read and what a send-back says are envs/review.py.

Both arms hear the same facts. A call the tool refuses is never handed in: it goes back to its
writer with `_refusal_line`, the same line in both arms, whoever let it through. A call the
validator rightly sent back because the tool would refuse it comes back with that same line
after the validator's words, because the lone agent would have heard it for the same call.

An env supplies four things: `_check` (a call as written, checked against the tool and the
answer key but not run), `_run` (run it, the action's info), `_hand_in` (make its result the
team's answer) and `_refusal_line`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pettingllms_cli.envs import review
from pettingllms_cli.envs.base import Outcome, TurnEnv

TEAM = ("planner", "validator", "reader")  # the `team` layout's roles in turn order


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

    def _reset_task(self) -> None:
        self.feedback: str | None = None  # what the next call's writer is told about the previous round
        self.draft: Draft | None = None  # `team`: the planner's call of this round
        self.ran = False  # `team`: the validator let this round's call go to the tool
        self.refused: str | None = None  # `team`: the tool's error for the call it let through

    # --- what the env supplies --------------------------------------------------------------------
    def _check(self, text: str) -> Draft:
        raise NotImplementedError

    def _run(self, draft: Draft) -> dict:
        """Send the call to the tool (it may refuse it); the info of the action that ran it."""
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
        info = self._run(draft)
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
        self._run(draft)
        if draft.refusal is not None:  # the tool refused it: back to the planner with the tool's error
            self.refused, self.feedback = draft.refusal, self._refusal_line(draft.refusal)
            return Outcome(local, 0.0, attempt=False, info={"verdict": "ran", "tool_error": draft.refusal, **due})
        return Outcome(local, 0.0, attempt=False, info={"verdict": "ran", **due})

    def _read(self, text: str) -> Outcome:
        """Hand the result in (ends the episode) or send the call back; with no verdict the result stands."""
        draft = self.draft
        if draft is None or self.refused is not None or not self.ran:  # nothing came back to read
            went = self.ran and self.refused is not None  # a refused call went to the tool: an attempt
            return Outcome(review.NOTHING_TO_READ, 0.0, attempt=went, info={"read": "refused" if went else "nothing ran"})
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
