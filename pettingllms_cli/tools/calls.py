"""The tool-call format: JSON inside `<tool_call>...</tool_call>` (the Hermes/Qwen convention).

A call is `{"name": "<tool>", "arguments": {...}}`. Parsing never raises: a malformed call is
returned as an error string so the env can turn it into a penalty.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_CALL_RE = re.compile(re.escape(OPEN) + r"(.*?)(?:" + re.escape(CLOSE) + r"|$)", re.DOTALL)


@dataclass
class ToolCall:
    name: str
    arguments: dict = field(default_factory=dict)


def parse_tool_call(text: str) -> ToolCall | str:
    """The first tool call in `text`, or an error message.

    >>> parse_tool_call('<tool_call>{"name": "calculator", "arguments": {"expression": "2+3"}}</tool_call>')
    ToolCall(name='calculator', arguments={'expression': '2+3'})
    >>> parse_tool_call('no call here')
    'no <tool_call> block'
    """
    match = _CALL_RE.search(text)
    if not match:
        return "no <tool_call> block"
    body = match.group(1).strip()
    try:
        obj = json.loads(body)
    except (json.JSONDecodeError, RecursionError):
        return "tool call is not valid JSON"
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return "tool call needs a string `name`"
    args = obj.get("arguments", {})
    if not isinstance(args, dict):
        return "tool call `arguments` must be an object"
    return ToolCall(obj["name"], args)


def render_tool_call(call: ToolCall) -> str:
    return f"{OPEN}{json.dumps({'name': call.name, 'arguments': call.arguments})}{CLOSE}"


def strip_tool_results(text: str) -> str:
    """Remove text that imitates a tool result, so a model cannot forge one in its own message."""
    return re.sub(r"<tool_response>.*?(</tool_response>|$)", "", text, flags=re.DOTALL)
