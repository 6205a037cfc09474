"""The tool-call format: JSON inside `<tool_call>...</tool_call>` (the Hermes/Qwen convention).

A call is `{"name": "<tool>", "arguments": {...}}`. Parsing never raises: a malformed call is
returned as an error string so the env can turn it into a penalty. That includes JSON Python
would choke on later: integers past Python's 4,300-digit limit, `NaN`/`Infinity`, and nesting
deeper than MAX_DEPTH (a deep tree would overflow the recursion of `copy.deepcopy` in tree
sampling).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

OPEN, CLOSE = "<tool_call>", "</tool_call>"
MAX_DEPTH = 32  # nesting of lists/objects a call may have; real tool arguments need a handful
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
        obj = json.loads(body, parse_constant=_no_constant, parse_float=_finite_float)
    except (ValueError, RecursionError):  # ValueError: JSONDecodeError, or an integer past 4,300 digits
        return "tool call is not valid JSON"
    if _depth(obj) > MAX_DEPTH:
        return f"tool call is nested deeper than {MAX_DEPTH} levels"
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return "tool call needs a string `name`"
    args = obj.get("arguments", {})
    if not isinstance(args, dict):
        return "tool call `arguments` must be an object"
    return ToolCall(obj["name"], args)


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")  # json accepts NaN and Infinity; strict JSON does not


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} overflows a float")  # `1e999` would be an infinity
    return value


def _depth(obj: object, limit: int = MAX_DEPTH) -> int:
    """Nesting depth of lists/objects, counted iteratively and only up to `limit` + 1.

    >>> _depth({"a": [1, {"b": []}]})
    4
    """
    depth, level = 0, [obj]
    while level and depth <= limit:
        containers = [x for x in level if isinstance(x, (dict, list))]
        if not containers:
            break
        depth += 1
        level = [v for x in containers for v in (x.values() if isinstance(x, dict) else x)]
    return depth


def render_tool_call(call: ToolCall) -> str:
    return f"{OPEN}{json.dumps({'name': call.name, 'arguments': call.arguments})}{CLOSE}"


def strip_tool_results(text: str) -> str:
    """Remove text that imitates a tool result, so a model cannot forge one in its own message."""
    return re.sub(r"<tool_response>.*?(</tool_response>|$)", "", text, flags=re.DOTALL)
