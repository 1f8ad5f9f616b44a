"""The spec's expression language: small, safe, and compiled to Python source (never ``eval``-ed from a string).

Allowed: int/float/bool/None/str constants, names (config fields, derived values, and rule variables such as the layer
index ``i``), arithmetic ``+ - * / // % **``, comparisons (incl. ``in``), ``and``/``or``/``not``, ``a if c else b``,
calls to ``min``/``max``/``len``/``int``/``float``/``bool``/``abs``, indexing ``x[k]``, list/tuple literals.
Everything else (attributes, lambdas, comprehensions, other calls) is rejected with the offending construct named.

Expressions are parsed once with :mod:`ast` and checked against the whitelist. Two consumers:
  * :meth:`Expr.to_python` renders the checked tree back to source with names rewritten (e.g. ``hidden_size`` ->
    ``hidden_size`` local in the generated ``from_hf_config``), so generated code holds plain Python;
  * :meth:`Expr.evaluate` is a tiny tree-walking interpreter used at build time (schedule checks, tests).
"""
from __future__ import annotations

import ast
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_}
_CMPOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
    ast.GtE: operator.ge, ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
    ast.Is: operator.is_, ast.IsNot: operator.is_not,
}
FUNCTIONS: dict[str, Callable[..., Any]] = {
    "min": min, "max": max, "len": len, "int": int, "float": float, "bool": bool, "abs": abs,
}


class ExprError(ValueError):
    def __init__(self, message: str, col: int = 0):
        super().__init__(message)
        self.col = col  # 0-based column inside the expression text


@dataclass
class Expr:
    text: str
    tree: ast.Expression
    names: frozenset[str] = field(default_factory=frozenset)

    def to_python(self, rename: Callable[[str], str] = lambda n: n) -> str:
        """Source of this expression with every free name passed through ``rename``."""

        class _Rename(ast.NodeTransformer):
            def visit_Name(self, node: ast.Name) -> ast.AST:
                if node.id in FUNCTIONS:
                    return node
                return ast.copy_location(ast.Name(id=rename(node.id), ctx=node.ctx), node)

        import copy

        tree = _Rename().visit(copy.deepcopy(self.tree))
        return ast.unparse(tree.body)

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        return _eval(self.tree.body, env)


def _check(node: ast.AST) -> None:
    """Reject any construct outside the whitelist."""
    ok = (
        ast.Expression, ast.Constant, ast.Name, ast.Load, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare,
        ast.IfExp, ast.Call, ast.Subscript, ast.List, ast.Tuple, ast.Slice, ast.And, ast.Or,
        *_BINOPS, *_UNARY, *_CMPOPS,
    )
    for sub in ast.walk(node):
        if not isinstance(sub, ok):
            col = getattr(sub, "col_offset", 0)
            raise ExprError(f"'{type(sub).__name__}' is not allowed in spec expressions", col)
        if isinstance(sub, ast.Call):
            if not isinstance(sub.func, ast.Name) or sub.func.id not in FUNCTIONS:
                raise ExprError(
                    f"only calls to {', '.join(sorted(FUNCTIONS))} are allowed", getattr(sub, "col_offset", 0)
                )
            if sub.keywords:
                raise ExprError("keyword arguments are not allowed", sub.col_offset)
        if isinstance(sub, ast.Constant) and not isinstance(sub.value, (int, float, bool, str, type(None))):
            raise ExprError(f"constant {sub.value!r} is not allowed", sub.col_offset)


def parse_expr(text: str | int | float | bool) -> Expr:
    """Parse and whitelist-check an expression; literals (YAML numbers/bools) are accepted as-is."""
    if not isinstance(text, str):
        text = repr(text)
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise ExprError(f"invalid expression {text!r}: {e.msg}", max((e.offset or 1) - 1, 0)) from None
    _check(tree)
    names = frozenset(
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not (n.id in FUNCTIONS or n.id in ("True", "False", "None"))
    )
    # A name used as a function is checked above; a bare function name used as a value is a name like any other.
    return Expr(text=text.strip(), tree=tree, names=names)


def _eval(node: ast.AST, env: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise ExprError(f"undefined name '{node.id}'", node.col_offset)
        return env[node.id]
    if isinstance(node, ast.BinOp):
        return _BINOPS[type(node.op)](_eval(node.left, env), _eval(node.right, env))
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_eval(node.operand, env))
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            value: Any = True
            for v in node.values:
                value = _eval(v, env)
                if not value:
                    return value
            return value
        value = False
        for v in node.values:
            value = _eval(v, env)
            if value:
                return value
        return value
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env)
        for op, comp in zip(node.ops, node.comparators):
            right = _eval(comp, env)
            if not _CMPOPS[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return _eval(node.body, env) if _eval(node.test, env) else _eval(node.orelse, env)
    if isinstance(node, ast.Call):
        return FUNCTIONS[node.func.id](*[_eval(a, env) for a in node.args])  # type: ignore[union-attr]
    if isinstance(node, ast.Subscript):
        return _eval(node.value, env)[_eval(node.slice, env)]
    if isinstance(node, ast.Slice):
        return slice(*(None if x is None else _eval(x, env) for x in (node.lower, node.upper, node.step)))
    if isinstance(node, ast.List):
        return [_eval(e, env) for e in node.elts]
    if isinstance(node, ast.Tuple):
        return tuple(_eval(e, env) for e in node.elts)
    raise ExprError(f"'{type(node).__name__}' is not allowed", getattr(node, "col_offset", 0))
