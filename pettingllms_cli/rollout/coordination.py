"""The optional coordination protocol (docs/design.md, "Coordination"): agree on intent before acting.

With `coordination.protocol: intent`, each turn opens with an intent round: every role, in
turn order, states in one short line what it will do (`<intent>...</intent>`), seeing the
intents already declared this turn. The roles then act as usual, and every observation shows
the turn's intents, so each role knows what the others said they would do. Each action is
checked against its role's intent and the share that agree is logged (`intent_agreement`).

The protocol is the rollout's: `Play` holds an episode's env with the intents declared this
turn and the checks of the actions taken after them; act.py runs the round (who declares when),
tree.py and parallel.py decide what is trained. The env only judges whether an action did what its intent said
(`TurnEnv.intent_agrees`; by default textual, envs/intents.py), always on the text the model
generated, never on the env's own prefill.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pettingllms_cli.envs.base import StepResult, TurnEnv
from pettingllms_cli.envs.messages import Message, generated_part, without_prefill

OPEN, CLOSE = "<intent>", "</intent>"
ASK = f"Before acting, say in one short line what you will do, as {OPEN}...{CLOSE}."
MAX_CHARS = 200  # an intent longer than this is cut: it is a line, not a plan
_INTENT_RE = re.compile(re.escape(OPEN) + r"(.*?)(?:" + re.escape(CLOSE) + r"|$)", re.DOTALL)


def extract(text: str) -> str:
    """The intent inside the first `<intent>` tag (an unclosed tag runs to the end), one line, at most MAX_CHARS.

    >>> extract("<intent>add 12 and 7</intent> then more")
    'add 12 and 7'
    >>> extract("no tag at all")
    ''
    """
    match = _INTENT_RE.search(text)
    return " ".join(match.group(1).split())[:MAX_CHARS] if match else ""


def board(intents: dict[str, str]) -> str:
    """The turn's declared intents as the lines every role sees."""
    return "Team intents this turn:\n" + "\n".join(f"- {role}: {text or '(none)'}" for role, text in intents.items())


def append_to_last_user(messages: list[Message], extra: str) -> list[Message]:
    """A copy of the conversation with `extra` appended to its last user message."""
    out = [dict(m) for m in messages]
    last = max((i for i, m in enumerate(out) if m["role"] == "user"), default=None)
    if last is None:
        out.insert(len(out) - (out[-1]["role"] == "assistant"), {"role": "user", "content": extra})
    else:
        out[last]["content"] = f"{out[last]['content']}\n\n{extra}"
    return out


def intent_prompt(observation: list[Message], intents: dict[str, str]) -> list[Message]:
    """What a role sees when it declares: its observation without the action prefill, the intents so far, and the ask."""
    messages = without_prefill(observation)
    extra = f"{board(intents)}\n{ASK}" if intents else ASK
    return append_to_last_user(messages, extra) + [{"role": "assistant", "content": OPEN}]


@dataclass
class Play:
    """One episode as the rollout plays it: the env, the intents declared this turn, and the checks.

    Without the protocol nobody declares, and a Play is its env. `copy()` copies all three, so a
    tree branch keeps its own checks.
    """

    env: TurnEnv
    intents: dict[str, str] = field(default_factory=dict)  # role -> intent declared this turn
    checks: list[tuple[int, str, bool]] = field(default_factory=list)  # (transcript index, intent, agreed) per checked action

    @property
    def done(self) -> bool:
        return self.env.done

    def declare(self, role: str, intent: str) -> None:
        """Broadcast `role`'s intent for this turn; every `view` shows it until the turn ends."""
        self.intents[role] = intent

    def view(self, role: str) -> list[Message]:
        """`observe(role)` with the intents declared this turn (the plain observation when there are none)."""
        observation = self.env.observe(role)
        return append_to_last_user(observation, board(self.intents)) if self.intents else observation

    def step(self, role: str, text: str) -> StepResult:
        """`env.step`, and, when `role` declared an intent, whether the action agreed with it (in `info`).

        Judged on what the model generated: text the env prefilled agrees with any intent that restates it.
        A turn's end opens a new round.
        """
        intent = self.intents.get(role)
        if intent is None:
            return self.env.step(role, text)
        observation = self.env.observe(role)  # before the step changes what the role would see
        turn = self.env.turn
        res = self.env.step(role, text)
        generated = generated_part(observation, text) if isinstance(text, str) else ""
        agreed = bool(self.env.intent_agrees(role, intent, generated))
        res.info = {**res.info, "intent": intent, "intent_agrees": agreed}
        self.checks.append((len(self.env.transcript) - 1, intent, agreed))
        if self.env.turn != turn:
            self.intents = {}  # the turn is over: the next one opens with a new round
        return res

    @property
    def intent_checks(self) -> list[bool]:
        """Per action taken after an intent: did it agree?"""
        return [agreed for _, _, agreed in self.checks]

    @property
    def intent_agreement(self) -> float | None:
        """Share of the actions taken after an intent that agreed with it; None when no intent was declared."""
        checks = self.intent_checks
        return sum(checks) / len(checks) if checks else None

    def transcript(self) -> list[dict]:
        """The env's transcript, each checked action with its intent and whether it agreed."""
        out = [dict(entry) for entry in self.env.transcript]
        for at, intent, agreed in self.checks:
            out[at] |= {"intent": intent, "intent_agrees": agreed}
        return out

    def copy(self) -> Play:
        return Play(self.env.copy(), dict(self.intents), list(self.checks))
