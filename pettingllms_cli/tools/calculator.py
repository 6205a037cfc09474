"""A safe calculator: arithmetic expressions evaluated from the AST, never with `eval`.

Only numbers, + - * / // % ** and parentheses; bounded magnitudes and exponents, so no input
can hang or exhaust memory. `calculate` is total: any string ends as a number or a
`CalculatorError` (overflow, NaN, infinities and deep nesting included), never another exception.
"""

from __future__ import annotations

import ast
import math
import operator

MAX_ABS = 1e15
MAX_EXPONENT = 64
MAX_LENGTH = 200

_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


class CalculatorError(ValueError):
    pass


def _in_range(value: float) -> float:
    """`value` if it is a finite real within MAX_ABS; NaN and infinities are out of range too."""
    if isinstance(value, complex) or not math.isfinite(value) or abs(value) > MAX_ABS:
        raise CalculatorError("result out of range")
    return value


def _eval(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return _in_range(node.value)  # `1e999` is a literal infinity
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise CalculatorError("exponent too large")
        try:
            value = _BINOPS[type(node.op)](left, right)
        except ZeroDivisionError:
            raise CalculatorError("division by zero") from None
        except OverflowError:  # float ** float past 1e308, e.g. 1e5**64
            raise CalculatorError("result out of range") from None
        return _in_range(value)
    raise CalculatorError(f"unsupported syntax: {type(node).__name__}")


def calculate(expression: str) -> float:
    """Evaluate an arithmetic expression.

    >>> calculate("(3 + 5) * 2")
    16
    >>> calculate("__import__('os')")
    Traceback (most recent call last):
    ...
    pettingllms_cli.tools.calculator.CalculatorError: unsupported syntax: Call
    """
    if not isinstance(expression, str) or len(expression) > MAX_LENGTH:
        raise CalculatorError("expression must be a string of at most 200 characters")
    expression = expression.replace("×", "*").replace("÷", "/").replace("^", "**")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError):
        raise CalculatorError("not an arithmetic expression") from None
    try:
        return _eval(tree.body)
    except RecursionError:
        raise CalculatorError("expression nested too deeply") from None


def format_number(value: float) -> str:
    """Integers without a decimal point, others rounded to 6 places.

    >>> format_number(8.0), format_number(2.5), format_number(1/3)
    ('8', '2.5', '0.333333')
    """
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.6f}".rstrip("0").rstrip(".")
