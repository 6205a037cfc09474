"""The one chat message type every layer passes: envs write observations, policy renders them."""

Message = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": str}


def prefill(messages: list[Message]) -> str:
    """The text a final assistant message asks the model to continue ("" when the conversation ends with a user turn)."""
    return messages[-1]["content"] if messages and messages[-1]["role"] == "assistant" else ""
