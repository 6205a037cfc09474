"""Conversations to token ids: the base's chat template, or plain text for bases without one.

A conversation that ends with an assistant message is continued, not answered (the prefill rule,
envs/messages.py).

Bounds: every message is first cut to `OBSERVATION_CHARS` (envs/messages.py `bounded`); then, given
`max_tokens` (the model's context less the tokens it will generate), a prompt that is still too long loses its
oldest history first (the earliest messages after the system prompt: dropped, or cut from their start and
marked), and as a last resort its oldest tokens, as TRL's `max_prompt_length` truncates from the left. A prompt never exceeds the
context, and generation never fails on length.
"""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase

from pettingllms_cli.envs.messages import Message, bounded, continues
from pettingllms_cli.tools.bounds import clip_left


def encode(
    tokenizer: PreTrainedTokenizerBase, messages: list[Message], template: str | None, max_tokens: int | None = None
) -> list[int]:
    """Token ids of a conversation (each message bounded), at most `max_tokens` of them; a final assistant message
    is a prefix the model continues."""
    messages = bounded(messages)
    ids = _ids(tokenizer, messages, template)
    return ids if max_tokens is None or len(ids) <= max_tokens else fit(tokenizer, messages, template, max_tokens, ids)


def fit(
    tokenizer: PreTrainedTokenizerBase, messages: list[Message], template: str | None, max_tokens: int, ids: list[int]
) -> list[int]:
    """Drop or cut the oldest history (never the system prompt or the newest message) until the prompt fits; then,
    if it still does not, keep its last `max_tokens` tokens."""
    history = [dict(m) for m in messages]
    k = next((i for i, m in enumerate(history) if m["role"] != "system"), len(history))  # the oldest turn
    while len(ids) > max_tokens and k < len(history) - 1:
        chars_per_token = max(1.0, sum(len(m["content"]) for m in history) / len(ids))
        excess = int((len(ids) - max_tokens) * chars_per_token) + 16  # an estimate; the loop re-encodes to check
        content = history[k]["content"]
        if excess >= len(content):
            del history[k]  # the whole message goes, its template tokens too
        else:
            history[k]["content"] = clip_left(content, len(content) - excess)
        ids = _ids(tokenizer, history, template)
    return ids[-max_tokens:]


def _ids(tokenizer: PreTrainedTokenizerBase, messages: list[Message], template: str | None) -> list[int]:
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
