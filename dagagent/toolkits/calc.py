"""A safe arithmetic evaluator (an ``ast`` walk over a whitelist; never ``eval``)."""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

__all__ = ["CalcError", "evaluate"]


class CalcError(ValueError):
    """The expression is not valid arithmetic, or is too large to compute."""


_BIN: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
_FUNCS: dict[str, Callable[..., Any]] = {
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
    "sqrt": math.sqrt,
    "log": math.log,
    "exp": math.exp,
}
_CONSTS = {"pi": math.pi, "e": math.e}
_MAX_EXPONENT = 1000
#: The largest integer a result may be, in bits (about 3,000 decimal digits): checked before
#: each product or power is computed, since the size of ``((9**999)**999)**19`` comes from
#: nesting, not from any one operator, and computing it would hold the process for minutes.
_MAX_BITS = 10_000
#: The most digits a number may be rounded to, either side of the point (a result's).
_MAX_DIGITS = 3_100
_MAX_LEN = 2000


def evaluate(expression: str) -> float | int:
    """Evaluate arithmetic such as ``"(3 + 4) * 2 / 7"`` or ``"max(1, 2) ** 2"``."""
    if len(expression) > _MAX_LEN:
        raise CalcError(f"expression is too long ({len(expression)} characters)")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise CalcError(f"not an arithmetic expression: {expression!r} ({exc.msg})") from None
    try:
        result = _eval(tree.body)
    except ZeroDivisionError:
        raise CalcError(f"division by zero in {expression!r}") from None
    except (OverflowError, ValueError) as exc:
        if isinstance(exc, CalcError):
            raise
        raise CalcError(f"cannot compute {expression!r}: {exc}") from None
    if isinstance(result, bool) or not isinstance(result, (int, float)):
        raise CalcError(f"{expression!r} does not evaluate to a number")
    return result


def _bits(value: Any) -> int:
    return value.bit_length() if isinstance(value, int) else 0


def _check_size(op: ast.operator, left: Any, right: Any) -> None:
    """Refuse an operation whose integer result would exceed :data:`_MAX_BITS`, before it
    is computed (floats overflow on their own, with an ``OverflowError``)."""
    too_large = False
    if isinstance(op, ast.Pow):
        if abs(right) > _MAX_EXPONENT:
            raise CalcError(f"exponent {right} is too large")
        if isinstance(left, int) and isinstance(right, int) and right > 0:
            too_large = max(_bits(left) - 1, 0) * right > _MAX_BITS
    elif isinstance(op, ast.Mult):
        too_large = _bits(left) + _bits(right) > _MAX_BITS + 1
    if too_large:
        raise CalcError(f"the result is too large (more than {_MAX_BITS} bits)")


def _check_call(name: str, args: list[Any]) -> None:
    """Refuse a call whose cost grows with an argument past what a result may be: rounding to
    ``n`` digits computes ``10 ** abs(n)`` (``round(3, -10**7)`` holds the process for half a
    minute, and a thread cannot be stopped)."""
    digits = args[1] if name == "round" and len(args) == 2 else None
    if isinstance(digits, int) and abs(digits) > _MAX_DIGITS:
        raise CalcError(f"cannot round to {digits} digits (at most {_MAX_DIGITS} either way)")


def _eval(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        if isinstance(node.value, bool):
            raise CalcError("booleans are not numbers here")
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
        left, right = _eval(node.left), _eval(node.right)
        _check_size(node.op, left, right)
        return _BIN[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.Name) and node.id in _CONSTS:
        return _CONSTS[node.id]
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCS
        and not node.keywords
    ):
        args = [_eval(a) for a in node.args]
        _check_call(node.func.id, args)
        return _FUNCS[node.func.id](*args)
    raise CalcError(f"not allowed in arithmetic: {ast.unparse(node)!r}")
