"""The chat message every layer passes (envs write observations, the policy renders them), and the one rule
about prefills: a conversation that ends with an assistant message asks the model to continue that
message (an env's action prefix such as `<tool_call>`, or coordination's `<intent>`), and the
action is that prefix plus what the model generates. Everything that renders a prompt or turns a
completion back into an action (policy/prompts.py, the rollout, coordination, distillation) uses these.

Every message reaching a prompt is bounded (`bounded`): at most `OBSERVATION_CHARS` characters (about 2,000
tokens), cut from the end with a visible mark (`... 3.2 MB cut`), so no tool result, judge reply or other
agent's message can blow up the next prompt. policy/prompts.py applies it to every prompt it encodes and then
fits the whole prompt into the model's context (docs/sandbox.md, "Bounded observations").
"""

from __future__ import annotations

from pettingllms_cli.tools.bounds import clip

Message = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": str}
OBSERVATION_CHARS = 8000  # characters one message may bring into a prompt (about 2,000 tokens)


def continues(messages: list[Message]) -> bool:
    """Does the conversation end with an assistant message for the model to continue?"""
    return bool(messages) and messages[-1]["role"] == "assistant"


def prefill(messages: list[Message]) -> str:
    """The prefix a final assistant message asks the model to continue ("" when there is none).

    >>> prefill([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "<tool_call>"}])
    '<tool_call>'
    """
    return messages[-1]["content"] if continues(messages) else ""


def without_prefill(messages: list[Message]) -> list[Message]:
    """The conversation without its final assistant prefix."""
    return messages[:-1] if continues(messages) else messages


def action_text(messages: list[Message], generated: str) -> str:
    """The whole action: the prefill the model continued plus the text it generated."""
    return prefill(messages) + generated


def generated_part(messages: list[Message], action: str) -> str:
    """The part of an action the model generated (the action without the conversation's prefill).

    >>> generated_part([{"role": "assistant", "content": "<a>"}], "<a>12</a>")
    '12</a>'
    """
    head = prefill(messages)
    return action[len(head) :] if action.startswith(head) else action


def bounded(messages: list[Message], limit: int = OBSERVATION_CHARS) -> list[Message]:
    """Each message cut to `limit` characters, marked; a final assistant prefill is the env's own and stays whole.

    >>> bounded([{"role": "user", "content": "x" * 5000}], limit=30)[0]["content"]
    'xxxxxxxxxxxxxxx ... 5.0 kB cut'
    """
    last = len(messages) - 1 if continues(messages) else len(messages)
    return [m if i == last else {**m, "content": clip(m["content"], limit)} for i, m in enumerate(messages)]
