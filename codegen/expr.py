"""The spec's expression language: small, safe, and compiled to Python source (never ``eval``-ed from a string).

Allowed: int/float/bool/None/str constants, names (config fields, derived values, and rule variables such as the layer
index ``i``), arithmetic ``+ - * / // % **``, comparisons (incl. ``in``), ``and``/``or``/``not``, ``a if c else b``,
calls to ``min``/``max``/``len``/``int``/``float``/``bool``/``abs``, indexing ``x[k]``, list/tuple literals.
Everything else (attributes, lambdas, comprehensions, other calls) is rejected with the offending construct named.

Expressions are parsed once with :mod:`ast` and checked against the whitelist. Two consumers:
  * :meth:`Expr.to_python` renders the checked tree back to source with names rewritten (e.g. ``hidden_size`` ->
    ``hidden_size`` local in the generated ``from_hf_config``), so generated code holds plain Python;
  * :meth:`Expr.evaluate` is a tiny tree-walking interpreter used at build time (codegen/evaluate.py evaluates every
    default and derived value of a spec against a sample config; schedule checks; tests).

Specs are untrusted, so everything is bounded: an expression has at most :data:`MAX_EXPR_CHARS` characters and
:data:`MAX_EXPR_NODES` syntax nodes nested at most :data:`MAX_EXPR_DEPTH` deep; evaluation refuses integers
wider than :data:`MAX_INT_BITS` bits (``9 ** 9 ** 9``
is refused before it is computed, from the operands' sizes), strings/lists longer than :data:`MAX_SEQ_LEN`
(``'x' * 10 ** 9``), ``%`` string formatting and complex results. Every failure of evaluation (a type error, a
division by zero, a bound) is an :class:`ExprError` with the column of the offending node, never another exception.
Sub-expressions without names are evaluated when parsed, so ``default: min`` (a function, not a value), ``1 // 0``
or ``hidden_size // "x"``-style constants fail at build time, located.
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
MAX_EXPR_CHARS = 1000  # the longest expression in specs/ today is a 130-character block rule
MAX_EXPR_NODES = 300
MAX_EXPR_DEPTH = 40
MAX_INT_BITS = 4096  # far above any model dimension; keeps `**`/`*` from allocating gigabytes
MAX_SEQ_LEN = 10_000  # strings/lists built by `*`/`+` (a layer-type list of 10k layers is still fine)


class ExprError(ValueError):
    def __init__(self, message: str, col: int = 0, cause: type[BaseException] | None = None):
        super().__init__(message)
        self.col = col  # 0-based column inside the expression text
        # The Python exception evaluation hit (TypeError, ZeroDivisionError, ...); None for the language's own
        # refusals (syntax, whitelist, bounds, undefined names).
        self.cause = cause


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
    called = {id(sub.func) for sub in ast.walk(node) if isinstance(sub, ast.Call)}
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id in FUNCTIONS and id(sub) not in called:
            raise ExprError(f"'{sub.id}' is a function, not a value; call it, e.g. {sub.id}(a, b)", sub.col_offset)
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
    if len(text) > MAX_EXPR_CHARS:
        raise ExprError(f"expression longer than {MAX_EXPR_CHARS} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise ExprError(f"invalid expression {text!r}: {e.msg}", max((e.offset or 1) - 1, 0)) from None
    except (ValueError, RecursionError, MemoryError) as e:  # NUL bytes; nesting the parser itself refuses
        raise ExprError(f"invalid expression: {type(e).__name__}: {e}") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_EXPR_NODES:
        raise ExprError(f"expression has more than {MAX_EXPR_NODES} parts")
    if _depth(tree) > MAX_EXPR_DEPTH:  # to_python's deepcopy/unparse and _eval recurse per level
        raise ExprError(f"expression nested deeper than {MAX_EXPR_DEPTH} levels")
    _check(tree)
    if _fold_constants(tree.body):
        _eval(tree.body, {})
    names = frozenset(
        n.id for n in ast.walk(tree)
        if isinstance(n, ast.Name) and not (n.id in FUNCTIONS or n.id in ("True", "False", "None"))
    )
    # A name used as a function is checked above; a bare function name used as a value is a name like any other.
    return Expr(text=text.strip(), tree=tree, names=names)


def _fold_constants(node: ast.AST) -> bool:
    """Evaluate every maximal name-free sub-expression now, so its errors are spec errors known at build time.

    Returns whether ``node`` is name-free (function names in call position do not count); one post-order pass."""
    children = [c for c in ast.iter_child_nodes(node) if isinstance(c, ast.expr)]
    if isinstance(node, ast.Call):
        children = [c for c in children if c is not node.func]
    constant = [_fold_constants(c) for c in children]
    if isinstance(node, ast.Name):
        return False
    if all(constant):
        return True
    for child, const in zip(children, constant):
        if const:
            _eval(child, {})
    return False


def _depth(node: ast.AST) -> int:
    return 1 + max((_depth(c) for c in ast.iter_child_nodes(node)), default=0)


def _bounded(value: Any, node: ast.AST) -> Any:
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_INT_BITS:
        raise ExprError(f"integer result wider than {MAX_INT_BITS} bits", getattr(node, "col_offset", 0))
    if isinstance(value, (str, list, tuple)) and len(value) > MAX_SEQ_LEN:
        raise ExprError(f"result longer than {MAX_SEQ_LEN} items", getattr(node, "col_offset", 0))
    if isinstance(value, complex):
        raise ExprError("complex result (e.g. a fractional power of a negative number)", getattr(node, "col_offset", 0))
    return value


def _size(value: Any) -> int:
    return len(value) if isinstance(value, (str, list, tuple)) else 0


def _binop(node: ast.BinOp, left: Any, right: Any) -> Any:
    """Refuse, from the operands' sizes, results that would be too large to compute."""
    op = type(node.op)
    col = node.col_offset
    ints = all(isinstance(v, int) for v in (left, right))
    if op is ast.Pow and ints and right > 0 and abs(left) > 1:
        if right > MAX_INT_BITS or (abs(left).bit_length() - 1) * right > MAX_INT_BITS:
            raise ExprError(f"{left} ** {right} is wider than {MAX_INT_BITS} bits", col)
    if op is ast.Mult:
        if ints and left.bit_length() + right.bit_length() > MAX_INT_BITS + 1:
            raise ExprError(f"product wider than {MAX_INT_BITS} bits", col)
        seq, n = (left, right) if _size(left) else (right, left)
        if _size(seq) and isinstance(n, int) and _size(seq) * n > MAX_SEQ_LEN:
            raise ExprError(f"repetition longer than {MAX_SEQ_LEN} items", col)
    if op is ast.Add and _size(left) + _size(right) > MAX_SEQ_LEN:
        raise ExprError(f"concatenation longer than {MAX_SEQ_LEN} items", col)
    if op is ast.Mod and isinstance(left, str):
        raise ExprError("'%' string formatting is not allowed", col)
    return _BINOPS[op](left, right)


def _eval(node: ast.AST, env: Mapping[str, Any]) -> Any:
    try:
        return _bounded(_eval_node(node, env), node)
    except ExprError:
        raise
    except (TypeError, ValueError, ArithmeticError, LookupError, RecursionError, MemoryError) as e:
        # A type error (`hidden_size // "x"`), division by zero, a missing index: the spec's fault, located.
        raise ExprError(f"cannot evaluate: {type(e).__name__}: {e}", getattr(node, "col_offset", 0), type(e)) from None


def _eval_node(node: ast.AST, env: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in env:
            if node.id in FUNCTIONS:
                raise ExprError(f"'{node.id}' is a function, not a value; call it, e.g. {node.id}(a, b)",
                                node.col_offset)
            raise ExprError(f"undefined name '{node.id}'", node.col_offset)
        return env[node.id]
    if isinstance(node, ast.BinOp):
        return _binop(node, _eval(node.left, env), _eval(node.right, env))
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
