"""The chat message every layer passes (envs write observations, the policy renders them), and the one rule
about prefills: a conversation that ends with an assistant message asks the model to continue that
message (an env's action prefix such as `<tool_call>`, or coordination's `<intent>`), and the
action is that prefix plus what the model generates. Everything that renders a prompt or turns a
completion back into an action (policy/prompts.py, the rollout, coordination, distillation) uses these.
"""

from __future__ import annotations

Message = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": str}


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
