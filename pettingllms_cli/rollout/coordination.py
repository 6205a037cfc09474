"""The optional coordination protocol (DESIGN.md §5): agree on intent before acting.

With `coordination.protocol: intent`, each turn opens with an intent round: every role, in
turn order, states in one short line what it will do (`<intent>...</intent>`), seeing the
intents already declared this turn. The roles then act as usual, and every observation shows
the turn's intents, so each role knows what the others said they would do. The env checks each
action against its role's intent and logs the share that agree (`intent_agreement`).

What counts as agreeing is the env's call (`TurnEnv.intent_agrees`); the default here is
textual: every number the intent names appears in the action, or, when it names none, at
least half of its words (three letters or more) do. An empty intent agrees with nothing.
"""

from __future__ import annotations

import re

Message = dict[str, str]

OPEN, CLOSE = "<intent>", "</intent>"
ASK = f"Before acting, say in one short line what you will do, as {OPEN}...{CLOSE}."
MAX_CHARS = 200  # an intent longer than this is cut: it is a line, not a plan
_TOKEN_RE = re.compile(r"\d+(?:\.\d+)?|[a-z_]\w*")
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


def agrees(intent: str, action: str) -> bool:
    """The default textual check that an action does what its intent said.

    >>> agrees("compute 12+7", '<tool_call>{"expression": "12+7"}')
    True
    >>> agrees("compute 12+7", '<tool_call>{"expression": "12-5"}')
    False
    >>> agrees("check the result", "I check the result: fine")
    True
    """
    said = set(_TOKEN_RE.findall(intent.lower()))
    done = set(_TOKEN_RE.findall(action.lower()))
    numbers = {t for t in said if t[0].isdigit()}
    if numbers:
        return numbers <= done
    words = {t for t in said if len(t) >= 3}
    return bool(words) and 2 * len(words & done) >= len(words)


def board(intents: dict[str, str]) -> str:
    """The turn's declared intents as the lines every role sees."""
    return "Team intents this turn:\n" + "\n".join(f"- {role}: {text or '(none)'}" for role, text in intents.items())


def _append_to_last_user(messages: list[Message], extra: str) -> list[Message]:
    """A copy of the conversation with `extra` appended to its last user message."""
    out = [dict(m) for m in messages]
    last = max((i for i, m in enumerate(out) if m["role"] == "user"), default=None)
    if last is None:
        out.insert(len(out) - (out[-1]["role"] == "assistant"), {"role": "user", "content": extra})
    else:
        out[last]["content"] = f"{out[last]['content']}\n\n{extra}"
    return out


def view(observation: list[Message], intents: dict[str, str]) -> list[Message]:
    """A role's observation with the turn's intents shown (unchanged when nobody declared one)."""
    return _append_to_last_user(observation, board(intents)) if intents else observation


def intent_prompt(observation: list[Message], intents: dict[str, str]) -> list[Message]:
    """What a role sees when it declares: its observation without the action prefill, the intents so far, and the ask."""
    messages = observation[:-1] if observation and observation[-1]["role"] == "assistant" else observation
    extra = f"{board(intents)}\n{ASK}" if intents else ASK
    return _append_to_last_user(messages, extra) + [{"role": "assistant", "content": OPEN}]
