"""Conversations to token ids, and the one rule about prefills.

The rule: a conversation that ends with an assistant message asks the model to continue that
message (an env's action prefix such as `<tool_call>`, or coordination's `<intent>`); the
action is that prefix plus what the model generates. Everything that renders a prompt or turns
a completion back into an action (rollout, coordination, distillation) goes through here.
"""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase

from pettingllms_cli.envs.messages import Message


def prefill(messages: list[Message]) -> str:
    """The prefix a final assistant message asks the model to continue ("" when there is none).

    >>> prefill([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "<tool_call>"}])
    '<tool_call>'
    """
    return messages[-1]["content"] if messages and messages[-1]["role"] == "assistant" else ""


def without_prefill(messages: list[Message]) -> list[Message]:
    """The conversation without its final assistant prefix (what a role sees before it is asked something else)."""
    return messages[:-1] if prefill(messages) or (messages and messages[-1]["role"] == "assistant") else messages


def action_text(messages: list[Message], generated: str) -> str:
    """The whole action: the prefill the model continued plus the text it generated."""
    return prefill(messages) + generated


def generated_part(messages: list[Message], action: str) -> str:
    """The part of an action the model generated (the action without the conversation's prefill)."""
    head = prefill(messages)
    return action[len(head) :] if action.startswith(head) else action


def encode(tokenizer: PreTrainedTokenizerBase, messages: list[Message], template: str | None) -> list[int]:
    """Token ids of a conversation; a final assistant message is a prefix the model continues."""
    continues = bool(messages) and messages[-1]["role"] == "assistant"
    if template is not None or tokenizer.chat_template is None:
        return tokenizer(render_plain(messages, template), add_special_tokens=True)["input_ids"]
    ids = tokenizer.apply_chat_template(
        messages, continue_final_message=continues, add_generation_prompt=not continues, tokenize=True, return_dict=False
    )
    return list(ids["input_ids"] if isinstance(ids, dict) else ids)


def render_plain(messages: list[Message], template: str | None) -> str:
    """A conversation as plain text for bases without a chat template."""
    lines = [m["content"] if m["role"] == "assistant" else f"{m['role']}: {m['content']}" for m in messages]
    conversation = "\n".join(lines)
    return (template or "{conversation}").format(conversation=conversation)
