"""The env's side of the intent protocol (rollout/coordination.py holds and runs it): the default check
that an action did what its intent said.

What counts as agreeing is the env's call (`TurnEnv.intent_agrees`); the default here is
textual: every number the intent names appears in the action, or, when it names none, at
least half of its words (three letters or more) do. An empty intent agrees with nothing.
"""

from __future__ import annotations

import re

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
