"""The env's side of the intent protocol (rollout/coordination.py runs the round): how an observation
shows the turn's declared intents, and the default check that an action did what its intent said.

What counts as agreeing is the env's call (`TurnEnv.intent_agrees`); the default here is
textual: every number the intent names appears in the action, or, when it names none, at
least half of its words (three letters or more) do. An empty intent agrees with nothing.
"""

from __future__ import annotations

import re

from pettingllms_cli.envs.messages import Message

_TOKEN_RE = re.compile(r"\d+(?:\.\d+)?|[a-z_]\w*")


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


def append_to_last_user(messages: list[Message], extra: str) -> list[Message]:
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
    return append_to_last_user(observation, board(intents)) if intents else observation
