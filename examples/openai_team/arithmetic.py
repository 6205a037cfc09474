"""The example's calculator: the first arithmetic expression in a text, evaluated without `eval` (numbers, + - * /,
parentheses); None when there is none or it does not compute."""

from __future__ import annotations

import ast
import operator
import re

OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
EXPRESSION = re.compile(r"[\d(][\d\s.+\-*/()]*")


def evaluate(text: str) -> float | None:
    """
    >>> evaluate("12+7"), evaluate(" 18 / 3 then"), evaluate("no numbers"), evaluate("1/0")
    (19.0, 6.0, None, None)
    """
    match = EXPRESSION.search(text)
    if not match:
        return None
    try:
        return float(_value(ast.parse(match.group().strip(), mode="eval").body))
    except (SyntaxError, ValueError, ZeroDivisionError, KeyError, TypeError, RecursionError):
        return None


def _value(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return node.value
    if isinstance(node, ast.BinOp):
        return OPS[type(node.op)](_value(node.left), _value(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_value(node.operand)
    raise ValueError("not arithmetic")
