"""The optional coordination protocol (docs/design.md, "Coordination"): agree on intent before acting.

With `coordination.protocol: intent`, each turn opens with an intent round: every role, in
turn order, states in one short line what it will do (`<intent>...</intent>`), seeing the
intents already declared this turn. The roles then act as usual, and every observation shows
the turn's intents, so each role knows what the others said they would do. The env checks each
action against its role's intent and logs the share that agree (`intent_agreement`).

What counts as agreeing is the env's call (`TurnEnv.intent_agrees`, envs/intents.py); the round
itself (who declares when, what is trained) is the rollout's (tree.py).
"""

from __future__ import annotations

import re

from pettingllms_cli.envs.intents import append_to_last_user, board
from pettingllms_cli.envs.messages import Message, without_prefill

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


def intent_prompt(observation: list[Message], intents: dict[str, str]) -> list[Message]:
    """What a role sees when it declares: its observation without the action prefill, the intents so far, and the ask."""
    messages = without_prefill(observation)
    extra = f"{board(intents)}\n{ASK}" if intents else ASK
    return append_to_last_user(messages, extra) + [{"role": "assistant", "content": OPEN}]
