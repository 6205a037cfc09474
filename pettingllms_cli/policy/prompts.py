"""Conversations to token ids: the base's chat template, or plain text for bases without one.

A conversation that ends with an assistant message is continued, not answered (the prefill rule,
envs/messages.py).
"""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase

from pettingllms_cli.envs.messages import Message, continues


def encode(tokenizer: PreTrainedTokenizerBase, messages: list[Message], template: str | None) -> list[int]:
    """Token ids of a conversation; a final assistant message is a prefix the model continues."""
    if template is not None or tokenizer.chat_template is None:
        return tokenizer(render_plain(messages, template), add_special_tokens=True)["input_ids"]
    ids = tokenizer.apply_chat_template(
        messages,
        continue_final_message=continues(messages),
        add_generation_prompt=not continues(messages),
        tokenize=True,
        return_dict=False,
    )
    return list(ids["input_ids"] if isinstance(ids, dict) else ids)


def render_plain(messages: list[Message], template: str | None) -> str:
    """A conversation as plain text for bases without a chat template."""
    lines = [m["content"] if m["role"] == "assistant" else f"{m['role']}: {m['content']}" for m in messages]
    conversation = "\n".join(lines)
    return (template or "{conversation}").format(conversation=conversation)
