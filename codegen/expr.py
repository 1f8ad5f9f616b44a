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
wider than :data:`MAX_INT_BITS` bits (``9 ** 9 ** 9`` is refused before it is computed, from the operands' sizes),
strings/lists longer than :data:`MAX_SEQ_LEN` (``'x' * 10 ** 9``), ``%`` string formatting and complex results.
Length alone is not enough: ``[[1] * 10000] * 10000`` is 10,000 references to one list, cheap to build, yet ``==``
on it walks 10^8 elements, and one more level 10^12. So every value is also measured by its *footprint* -- the
elements a comparison, ``in``, ``min``/``max`` or a copy may walk, counting a shared sub-list once per reference
(:func:`footprint`, memoised, so measuring is linear in the distinct objects) -- and refused above
:data:`MAX_ELEMENTS`, from the operands before a repetition or concatenation is computed; and one evaluation (a whole
expression, or the constant folding at parse time) has a :class:`Budget` of :data:`MAX_EVAL_COST` units: one per
node evaluated plus the footprint of every value produced, compared, searched or passed to a function. Nested
values deeper than :data:`MAX_VALUE_DEPTH` are refused too (Python's own ``==`` recurses per level). With at most
300 nodes each costing at most the budget, any expression finishes in well under a second or is refused.
Every failure of evaluation (a type error, a division by zero, a bound) is an :class:`ExprError` with the column of
the offending node, never another exception; values in messages are shortened (:func:`short_repr`).
Sub-expressions without names are evaluated when parsed, so ``default: min`` (a function, not a value), ``1 // 0``
or ``hidden_size // "x"``-style constants fail at build time, located.
"""
from __future__ import annotations

import ast
import copy
import operator
import re
import reprlib
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

from .errors import shorten
from .literal import markup_escaped

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
MAX_ELEMENTS = 1_000_000  # footprint of one value: a 10k-layer list of layer-type names is ~150k
MAX_EVAL_COST = 10_000_000  # per evaluation: elements walked in C (~0.1 s); a real spec spends a few hundred
MAX_SPEC_COST = 3 * MAX_EVAL_COST  # all evaluations of one spec together (shared_budget): a spec of thousands of
#                                    expressions each just under MAX_EVAL_COST must not add up to minutes
MEASURE_COST = 10  # budget units per item measured in Python (about ten C-level element steps)
MAX_VALUE_DEPTH = 32  # nesting of list/tuple/dict values (config values are at most 2 deep)
MAX_SHOWN = 200  # characters of a value quoted in an error message

_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxtuple, _SHORT.maxdict = 3, 8, 8, 8
_SHORT.maxstring, _SHORT.maxlong, _SHORT.maxother = 80, 60, 80


def short_repr(value: Any) -> str:
    """``repr`` bounded in time and length: a 10^8-element value must not become a 300 MB error message."""
    return shorten(_SHORT.repr(value), MAX_SHOWN)


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

        tree = _Rename().visit(copy.deepcopy(self.tree))
        return ast.unparse(tree.body)

    def to_spec(self) -> str:
        """The expression's own text for documentation (``Value.spec``): :meth:`to_python` with every string
        constant's markup characters escaped (:func:`~modelgen.codegen.literal.markup_escaped`), so it cannot leave
        the Markdown code span a README puts it in."""
        strings: list[str] = []

        class _Mark(ast.NodeTransformer):
            def visit_Constant(self, node: ast.Constant) -> ast.AST:
                if not isinstance(node.value, str):
                    return node
                strings.append(node.value)
                return ast.Name(id=f"\0{len(strings) - 1}\0", ctx=ast.Load())  # NUL: never in parsed source

        text = ast.unparse(_Mark().visit(copy.deepcopy(self.tree)).body)
        return re.sub(r"\0(\d+)\0", lambda m: markup_escaped(repr(strings[int(m.group(1))])), text)

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        return _eval(self.tree.body, env, Budget())


class _Pool:
    """Units left to every evaluation inside one :func:`shared_budget`, and the footprints measured there."""

    def __init__(self, limit: int):
        self.left = limit
        # id -> (the object, kept alive so its id is not reused; footprint; height of nesting below it)
        self.known: dict[int, tuple[Any, int, int]] = {}


_POOL: ContextVar[_Pool | None] = ContextVar("modelgen_expr_pool", default=None)


@contextmanager
def shared_budget(limit: int | None = None) -> Iterator[None]:
    """Every evaluation and constant folding inside shares ``limit`` units (one spec's compile or check); nested
    uses join the outermost."""
    if _POOL.get() is not None:
        yield
        return
    token = _POOL.set(_Pool(MAX_SPEC_COST if limit is None else limit))
    try:
        yield
    finally:
        _POOL.reset(token)


class Budget:
    """What one evaluation may still spend, and the footprints it has measured.

    Units are elements walked: a comparison charges both operands' footprints, a repetition or concatenation the
    length it builds, every node one, measuring :data:`MEASURE_COST` per item it visits (measurements are memoised
    by object, so a list repeated 10,000 times by reference is measured once)."""

    def __init__(self, limit: int | None = None):
        self.left = MAX_EVAL_COST if limit is None else limit
        self.pool = _POOL.get()
        self._known = self.pool.known if self.pool is not None else _Pool(0).known

    def charge(self, units: int, node: ast.AST) -> None:
        self.left -= units
        if self.left < 0:
            raise ExprError(f"evaluation needs more than {MAX_EVAL_COST} steps (values too large or compared too "
                            "often)", getattr(node, "col_offset", 0))
        if self.pool is not None:
            self.pool.left -= units
            if self.pool.left < 0:
                raise ExprError(f"this spec's expressions together need more than {MAX_SPEC_COST} evaluation steps",
                                getattr(node, "col_offset", 0))

    def footprint(self, value: Any, node: ast.AST) -> int:
        """Elements a walk over ``value`` visits: 1 per scalar, a string's length, a container's items recursively,
        a shared sub-list once per reference. Refuses values above :data:`MAX_ELEMENTS` or nested deeper than
        :data:`MAX_VALUE_DEPTH`, stopping as soon as it knows."""
        if isinstance(value, str):
            return max(len(value), 1)
        if not isinstance(value, (list, tuple, dict)):
            return 1
        return self._container(value, node, 1)[0]

    def _container(self, value: Any, node: ast.AST, depth: int) -> tuple[int, int]:
        known = self._known.get(id(value))
        if known is None:
            if depth > MAX_VALUE_DEPTH:
                raise ExprError(f"value nested deeper than {MAX_VALUE_DEPTH} levels", getattr(node, "col_offset", 0))
            total, height = 1, 0
            self.charge(MEASURE_COST * len(value), node)
            for item in (x for kv in value.items() for x in kv) if isinstance(value, dict) else value:
                if isinstance(item, str):
                    total += max(len(item), 1)
                elif isinstance(item, (list, tuple, dict)):
                    size, below = self._container(item, node, depth + 1)
                    total, height = total + size, max(height, below + 1)
                else:
                    total += 1
                if total > MAX_ELEMENTS:
                    raise ExprError(f"value of more than {MAX_ELEMENTS} elements (counting each reference to a "
                                    "shared list)", getattr(node, "col_offset", 0))
            known = self._known[id(value)] = (value, total, height)
        if depth + known[2] > MAX_VALUE_DEPTH:
            raise ExprError(f"value nested deeper than {MAX_VALUE_DEPTH} levels", getattr(node, "col_offset", 0))
        return known[1], known[2]


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
        raise ExprError(f"invalid expression {short_repr(text)}: {e.msg}", max((e.offset or 1) - 1, 0)) from None
    except (ValueError, RecursionError, MemoryError) as e:  # NUL bytes; nesting the parser itself refuses
        raise ExprError(f"invalid expression: {type(e).__name__}: {e}") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_EXPR_NODES:
        raise ExprError(f"expression has more than {MAX_EXPR_NODES} parts")
    if _depth(tree) > MAX_EXPR_DEPTH:  # to_python's deepcopy/unparse and _eval recurse per level
        raise ExprError(f"expression nested deeper than {MAX_EXPR_DEPTH} levels")
    _check(tree)
    budget = Budget()  # one for all the folding of this expression
    if _fold_constants(tree.body, budget):
        _eval(tree.body, {}, budget)
    names = frozenset(
        n.id for n in ast.walk(tree)
        if isinstance(n, ast.Name) and not (n.id in FUNCTIONS or n.id in ("True", "False", "None"))
    )
    # A name used as a function is checked above; a bare function name used as a value is a name like any other.
    return Expr(text=text.strip(), tree=tree, names=names)


def _fold_constants(node: ast.AST, budget: Budget) -> bool:
    """Evaluate every maximal name-free sub-expression now, so its errors are spec errors known at build time.

    Returns whether ``node`` is name-free (function names in call position do not count); one post-order pass."""
    children = [c for c in ast.iter_child_nodes(node) if isinstance(c, ast.expr)]
    if isinstance(node, ast.Call):
        children = [c for c in children if c is not node.func]
    constant = [_fold_constants(c, budget) for c in children]
    if isinstance(node, ast.Name):
        return False
    if all(constant):
        return True
    for child, const in zip(children, constant):
        if const:
            _eval(child, {}, budget)
    return False


def _depth(node: ast.AST) -> int:
    return 1 + max((_depth(c) for c in ast.iter_child_nodes(node)), default=0)


def _bounded(value: Any, node: ast.AST, budget: Budget) -> Any:
    budget.charge(1, node)
    budget.footprint(value, node)  # refuses a value too large or too deep to walk
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_INT_BITS:
        raise ExprError(f"integer result wider than {MAX_INT_BITS} bits", getattr(node, "col_offset", 0))
    if isinstance(value, (str, list, tuple)) and len(value) > MAX_SEQ_LEN:
        raise ExprError(f"result longer than {MAX_SEQ_LEN} items", getattr(node, "col_offset", 0))
    if isinstance(value, complex):
        raise ExprError("complex result (e.g. a fractional power of a negative number)", getattr(node, "col_offset", 0))
    return value


def _size(value: Any) -> int:
    return len(value) if isinstance(value, (str, list, tuple)) else 0


def _binop(node: ast.BinOp, left: Any, right: Any, budget: Budget) -> Any:
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
        if _size(seq) and isinstance(n, int):
            if _size(seq) * n > MAX_SEQ_LEN:
                raise ExprError(f"repetition longer than {MAX_SEQ_LEN} items", col)
            if budget.footprint(seq, node) * n > MAX_ELEMENTS:  # [[1] * 10000] * 10000: short, but 10^8 to walk
                raise ExprError(f"repetition of more than {MAX_ELEMENTS} elements (counting nested ones)", col)
            budget.charge(_size(seq) * max(n, 0), node)
    if op is ast.Add and (_size(left) or _size(right)):
        if _size(left) + _size(right) > MAX_SEQ_LEN:
            raise ExprError(f"concatenation longer than {MAX_SEQ_LEN} items", col)
        if budget.footprint(left, node) + budget.footprint(right, node) > MAX_ELEMENTS:
            raise ExprError(f"concatenation of more than {MAX_ELEMENTS} elements (counting nested ones)", col)
        budget.charge(_size(left) + _size(right), node)
    if op is ast.Mod and isinstance(left, str):
        raise ExprError("'%' string formatting is not allowed", col)
    return _BINOPS[op](left, right)


def _eval(node: ast.AST, env: Mapping[str, Any], budget: Budget) -> Any:
    try:
        return _bounded(_eval_node(node, env, budget), node, budget)
    except ExprError:
        raise
    except (TypeError, ValueError, ArithmeticError, LookupError, RecursionError, MemoryError) as e:
        # A type error (`hidden_size // "x"`), division by zero, a missing index: the spec's fault, located. The
        # message may quote a value (a KeyError's key, int()'s argument): shortened.
        raise ExprError(f"cannot evaluate: {type(e).__name__}: {shorten(str(e), MAX_SHOWN)}", getattr(node, "col_offset", 0),
                        type(e)) from None


def _walked(budget: Budget, node: ast.AST, *values: Any) -> None:
    """Charge for a C-level walk over ``values`` (a comparison, ``in``, a call's arguments)."""
    budget.charge(sum(budget.footprint(v, node) for v in values), node)


def _eval_node(node: ast.AST, env: Mapping[str, Any], budget: Budget) -> Any:
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
        return _binop(node, _eval(node.left, env, budget), _eval(node.right, env, budget), budget)
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_eval(node.operand, env, budget))
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            value: Any = True
            for v in node.values:
                value = _eval(v, env, budget)
                if not value:
                    return value
            return value
        value = False
        for v in node.values:
            value = _eval(v, env, budget)
            if value:
                return value
        return value
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env, budget)
        for op, comp in zip(node.ops, node.comparators):
            right = _eval(comp, env, budget)
            _walked(budget, comp, left, right)
            if not _CMPOPS[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return _eval(node.body, env, budget) if _eval(node.test, env, budget) else _eval(node.orelse, env, budget)
    if isinstance(node, ast.Call):
        args = [_eval(a, env, budget) for a in node.args]
        _walked(budget, node, *args)  # min/max compare their items
        return FUNCTIONS[node.func.id](*args)  # type: ignore[union-attr]
    if isinstance(node, ast.Subscript):
        return _eval(node.value, env, budget)[_eval(node.slice, env, budget)]
    if isinstance(node, ast.Slice):
        return slice(*(None if x is None else _eval(x, env, budget) for x in (node.lower, node.upper, node.step)))
    if isinstance(node, ast.List):
        return [_eval(e, env, budget) for e in node.elts]
    if isinstance(node, ast.Tuple):
        return tuple(_eval(e, env, budget) for e in node.elts)
    raise ExprError(f"'{type(node).__name__}' is not allowed", getattr(node, "col_offset", 0))
