"""The `calculator` tool: safe arithmetic on an AST whitelist (never `eval`).

Allowed: int/float literals, + - * / // %, ** with |exponent| <= MAX_EXPONENT and a bounded result,
unary +/-, parentheses. Anything else (names, calls, attributes, subscripts, strings, comparisons...)
is rejected with an error text the model sees. Integral results print as ints ("1776", "3").
The schema IS trainer.tasks.arith.CALCULATOR_SCHEMA (a copy): the demo's prompts render it.
"""
from __future__ import annotations

import ast
import copy
import math
import operator
from typing import Any

from trainer.tasks.arith import CALCULATOR_SCHEMA
from trainer.tools.base import BaseTool, ToolArgumentError, ToolResult, register_tool

MAX_EXPONENT = 100
MAX_ABS_RESULT = 1e300
MAX_EXPRESSION_CHARS = 512
MAX_INT_DIGITS = 400  # bounds intermediate ints (1000 * 10**... chains stay cheap)

_BINOPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


class CalculatorError(ValueError):
    pass


def _check(value: float | int) -> float | int:
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("result is not a finite number")
    if isinstance(value, int) and value.bit_length() > MAX_INT_DIGITS * 3.33:
        raise CalculatorError("result is too large")
    if abs(value) > MAX_ABS_RESULT:
        raise CalculatorError("result is too large")
    return value


def _eval(node: ast.AST) -> float | int:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _check(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _check(_UNARY[type(node.op)](_eval(node.operand)))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            if abs(right) > MAX_EXPONENT:
                raise CalculatorError(f"exponent too large (|exponent| <= {MAX_EXPONENT})")
            if abs(left) > 1 and abs(right) * math.log10(abs(left)) > 300:
                raise CalculatorError("result is too large")
        if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
            raise CalculatorError("division by zero")
        try:
            result = _BINOPS[type(node.op)](left, right)
        except (OverflowError, ZeroDivisionError) as exc:
            raise CalculatorError(str(exc)) from None
        if isinstance(result, complex):
            raise CalculatorError("result is not a real number")
        return _check(result)
    raise CalculatorError(f"unsupported syntax: {type(node).__name__}")


def format_number(value: float | int) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, float):
        return format(value, ".12g")  # 12 significant digits hide binary noise (0.1+0.2 -> 0.3)
    return str(value)


def calculate(expression: str) -> str:
    """Evaluate `expression`; returns the formatted number. Raises CalculatorError."""
    if not isinstance(expression, str):
        raise CalculatorError("expression must be a string")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    text = expression.strip().replace("×", "*").replace("÷", "/")
    if not text:
        raise CalculatorError("empty expression")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise CalculatorError(f"cannot parse {expression!r}") from None
    return format_number(_eval(tree))


@register_tool
class CalculatorTool(BaseTool):
    name = "calculator"
    # One source of truth: the demo task's warm-start data renders this exact schema into its
    # prompts, so the RL prompts must carry the same one token for token.
    schema: dict[str, Any] = copy.deepcopy(CALCULATOR_SCHEMA)

    async def execute(self, instance_id: str, arguments: dict[str, Any], **kwargs: Any) -> ToolResult:
        self.check_arguments(arguments)
        expr = arguments["expression"]
        if isinstance(expr, (int, float)) and not isinstance(expr, bool):
            expr = str(expr)
        if not isinstance(expr, str):
            raise ToolArgumentError("expression must be a string")
        try:
            return ToolResult(calculate(expr))
        except CalculatorError as exc:
            # An argument problem: the agent shows "Error: ..." and counts it in tool_errors.
            raise ToolArgumentError(str(exc)) from None
