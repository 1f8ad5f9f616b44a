"""Tokenizer from a checkpoint's ``tokenizer.json`` (``tokenizers``), with chat templates rendered in a sandboxed,
bounded Jinja2 environment (templates are untrusted data, not code).

Chat template limits (see SECURITY.md). Jinja2's ImmutableSandboxedEnvironment already blocks attribute escapes and
mutation of lists/dicts and caps ``range`` at 100,000 items; on top of it every render here has
  * a time limit (``RENDER_SECONDS``), checked at every loop iteration, call, operator and output node, and every
    ``TICK_EVERY`` items inside the loops of one operation, so nested loops, recursive macros and one long ``join``
    stop in time without a watchdog thread;
  * a size budget (``RENDER_CHARS``, grown with the size of the messages): every operation that can make a string,
    bytes or list larger than its inputs (``*``, ``+``, ``~``, ``%``, ``**``, ``join``, ``replace``,
    ``center``/``ljust``/..., ``format``, ``indent``, ``wordwrap``, filter and method results) and every piece of
    output is charged against it, with the size computed *before* the operation where it can explode (``'x' *
    10**10`` is refused without being built; format widths count for all fields together);
  * a cap on integer sizes (``**`` and ``*`` of huge ints) and on template text length;
  * nothing kept after a failure: the raised error holds no frame of the failed render (see apply_chat_template).
Every violation, and every template error (syntax, undefined value, sandbox refusal, ``raise_exception``), is a
:class:`ChatTemplateError` whose one-line message names the template's file (``tokenizer_config.json`` or
``chat_template.jinja``).
"""
from __future__ import annotations

import contextvars
import functools
import json
import re
import time
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as _HFTokenizer

from .loader.files import MAX_CONFIG_BYTES, MAX_TOKENIZER_BYTES, read_bytes, read_json_object

RENDER_SECONDS = 1.0
RENDER_CHARS = 16 << 20  # characters produced by one render, at least; grows with the input (see _render_budget)
MAX_TEMPLATE_CHARS = 1 << 20
MAX_ERROR_CHARS = 500  # an error message quotes at most this much of what the template produced
MAX_INT_BITS = 1 << 16  # ints beyond ~19,700 decimal digits are refused (squaring loops would stall in C)
# Sequences are sized item by item (Python speed); one with more items than this counts as over any budget, which
# keeps every size check under ~0.1 s. Jinja's own range() stops at 100,000 items.
MAX_ITEMS = 200_000
_GUARD_ITER, _GUARD_OUT, _GUARD_CONCAT = "__modelgen_iter", "__modelgen_out", "__modelgen_concat"


class TokenizerFileError(ValueError):
    """A tokenizer file of the checkpoint could not be read; the message names the file."""


class ChatTemplateError(ValueError):
    """A chat template failed or exceeded a limit; the one-line message names the template's file."""


class _LimitExceeded(Exception):
    pass


def _one_line(text: Any) -> str:
    return " ".join(str(text)[:MAX_ERROR_CHARS * 4].split())[:MAX_ERROR_CHARS]


def _release(error: BaseException) -> None:
    """Free what a failed render holds: the locals of every finished frame in the tracebacks of ``error`` and the
    exceptions it chains (``__context__`` / ``__cause__``), and the links themselves (they form reference cycles
    that only the garbage collector would break, after who knows how many more requests)."""
    import traceback

    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if error.__traceback__ is not None:
            traceback.clear_frames(error.__traceback__)
        error.__traceback__ = None
        nxt = error.__cause__ or error.__context__
        error.__cause__ = error.__context__ = None
        error = nxt


# ------------------------------------------------------------------------------------------------- render budget
class _Budget:
    def __init__(self, chars: int, seconds: float):
        self.limit = self.left = chars
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise _LimitExceeded(f"rendering took longer than the {self.seconds:g} s render time limit")

    def charge(self, size: int, what: str) -> None:
        if size > self.left:
            raise _LimitExceeded(
                f"{what} would produce about {size} characters, over what is left of the {self.limit}-character "
                f"render size limit"
            )
        self.left -= size


_BUDGET: contextvars.ContextVar[_Budget] = contextvars.ContextVar("chat_template_budget")


def _budget() -> _Budget:
    budget = _BUDGET.get()
    budget.tick()
    return budget


_BYTES = (bytes, bytearray)  # charged by length like strings: ('x' * 10**6).encode() * 2500 is 2.5 GB too
_SEQUENCES = (str, bytes, bytearray, list, tuple)  # what `*` and `+` can make larger than their operands
_RESULTS = (str, bytes, bytearray, list, tuple, dict, set, frozenset)  # results charged after a call / filter
TICK_EVERY = 256  # items between clock checks inside the loops below (the time limit holds inside one operation)


def _size(value: Any, cap: int) -> int:
    """Printed size of ``value`` (as ``str()`` would make it), computed without building it; stops past ``cap``."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, _BYTES):
        return len(value)
    if isinstance(value, (list, tuple, set, frozenset, dict, range)):
        if len(value) > MAX_ITEMS:
            return max(cap + 1, 3 * len(value))
        total = 2
        items = value.items() if isinstance(value, dict) else value
        if isinstance(value, range):
            return 2 + len(value) * (len(str(value[-1])) + 2) if len(value) else 7
        budget = _BUDGET.get(None)
        for i, item in enumerate(items):
            total += 2 + (_size(item[0], cap) + _size(item[1], cap) + 2 if isinstance(value, dict) else _size(item, cap))
            if total > cap:
                return total
            if budget is not None and i % TICK_EVERY == TICK_EVERY - 1:
                budget.tick()
        return total
    if isinstance(value, int) and not isinstance(value, bool):
        return value.bit_length() // 3 + 2
    return 32  # numbers, None, booleans, namespaces: small reprs


def _width_args(values, budget: _Budget, what: str) -> int:
    """Characters the integer arguments could add as widths (``'%*s'``, ``'{0:{1}}'``): all of them, summed (250
    widths of 10**7 each are 2.5 GB although each one alone fits); refused here when over the budget."""
    ints = [abs(x) for x in values if isinstance(x, int) and not isinstance(x, bool)]
    total = sum(ints)
    if total > budget.left:
        largest = max(ints)
        shown = largest if largest.bit_length() < 200 else f"of {largest.bit_length()} bits"
        raise _LimitExceeded(f"{what}: numeric argument {shown} (width arguments {len(ints)}, together "
                             f"{total if total.bit_length() < 200 else 'huge'}) is over the {budget.left} characters "
                             f"left of the {budget.limit}-character render size limit")
    return total


# A %-field's width and precision ('%-9999999.5s'), and the spec of a {}-field ('{0:>9999999}'): the numbers that
# make a format string print more than its arguments.
_PERCENT_FIELD = re.compile(rb"%(?:\([^)]*\))?[#0\- +]*(\d*)(?:\.(\d*))?")
_BRACE_SPEC = re.compile(rb"\{[^{}:]*:([^{}]*)\}")
_DIGITS = re.compile(rb"\d+")


def _format_widths(fmt: str | bytes) -> int:
    """Characters the widths and precisions written in a format string could add, all fields summed
    (``'%9999999s' * 250`` is 2.5 G characters although each width alone fits the budget)."""
    raw = fmt.encode("utf-8", "replace") if isinstance(fmt, str) else bytes(fmt)
    numbers = [d for m in _PERCENT_FIELD.finditer(raw) for d in m.groups() if d]
    numbers += [d for m in _BRACE_SPEC.finditer(raw) for d in _DIGITS.findall(m.group(1))]
    return sum(int(d) if len(d) <= 18 else 1 << 64 for d in numbers)


def _precheck_format(fmt: str | bytes, values: list, budget: _Budget, what: str) -> None:
    widths = _format_widths(fmt)
    if widths > budget.left:
        raise _LimitExceeded(f"{what}: width {widths} in the format string (all fields together) is over the "
                             f"render size limit")
    star = "*" if isinstance(fmt, str) else b"*"
    if star in fmt or re.search(r"\{[^{}]*:[^{}]*\{", fmt if isinstance(fmt, str) else ""):
        widths += _width_args(values, budget, what)  # widths taken from the arguments
    percent, brace = ("%", "{") if isinstance(fmt, str) else (b"%", b"{")
    fields = fmt.count(percent) + fmt.count(brace)  # each field may print the largest argument once
    largest = max((_size(v, budget.left) for v in values), default=0)
    budget.charge(len(fmt) + widths + fields * largest, what)


def _precheck_join(items: list, sep: str, budget: _Budget, what: str) -> None:
    budget.charge(sum(_size(x, budget.left) for x in items) + len(sep) * max(len(items) - 1, 0), what)


def _precheck_replace(s, old, new, count: int | None, budget: _Budget, what: str) -> None:
    hits = len(s) + 1 if old == "" else s.count(old)
    if count is not None and count >= 0:
        hits = min(hits, count)
    budget.charge(len(s) + hits * max(len(new) - len(old), 0), what)


def _precheck_str_method(s: str | bytes, name: str, args: list, kwargs: dict, budget: _Budget) -> None:
    """``s.name(*args)`` for a str or bytes ``s`` (the same methods grow both)."""
    what = f"{type(s).__name__}.{name}()"
    text = (str, *_BYTES)
    if name in ("ljust", "rjust", "center", "zfill") and args and isinstance(args[0], int):
        budget.charge(max(len(s), args[0]), what)
    elif name == "expandtabs":
        tab = args[0] if args else kwargs.get("tabsize", 8)
        budget.charge(len(s) + s.count("\t" if isinstance(s, str) else b"\t") * max(int(tab), 0), what)
    elif name == "replace" and len(args) >= 2 and isinstance(args[0], text) and isinstance(args[1], text):
        _precheck_replace(s, args[0], args[1], args[2] if len(args) > 2 else kwargs.get("count"), budget, what)
    elif name == "translate" and args and isinstance(args[0], dict) and isinstance(s, str):
        longest = max((len(v) for v in args[0].values() if isinstance(v, str)), default=1)
        budget.charge(len(s) * max(longest, 1), what)
    elif name in ("format", "format_map") and isinstance(s, str):
        values = list(args) + list(kwargs.values())
        if name == "format_map" and args and isinstance(args[0], dict):
            values = list(args[0].values())
        _precheck_format(s, values, budget, what)


# Filters whose output can be far larger than their input: checked before they run (value = first argument).
def _precheck_filter(name: str, value: Any, args: list, kwargs: dict, budget: _Budget) -> None:
    what = f"filter '{name}'"
    if name == "center":
        width = args[0] if args else kwargs.get("width", 80)
        budget.charge(max(_size(value, budget.left), int(width)), what)
    elif name == "replace" and isinstance(value, str) and len(args) >= 2:
        _precheck_replace(value, str(args[0]), str(args[1]), args[2] if len(args) > 2 else kwargs.get("count"),
                          budget, what)
    elif name == "indent":
        width = args[0] if args else kwargs.get("width", 4)
        lines = str(value).count("\n") + 1 if isinstance(value, str) else 1
        budget.charge(_size(value, budget.left) + lines * (len(width) if isinstance(width, str) else int(width)), what)
    elif name == "wordwrap":
        wrap = args[2] if len(args) > 2 else kwargs.get("wrapstring") or "\n"
        budget.charge(_size(value, budget.left) * (1 + len(str(wrap))), what)
    elif name == "format" and isinstance(value, str):
        _precheck_format(value, list(args) + list(kwargs.values()), budget, what)
    elif name in ("batch", "slice"):  # with fill_with, the count of groups/items is created from nothing
        count = args[0] if args else kwargs.get("linecount", kwargs.get("slices", 0))
        if (len(args) > 1 or "fill_with" in kwargs) and isinstance(count, int):
            budget.charge(_size(value, budget.left) + 3 * max(count, 0), what)
    elif name == "tojson":
        indent = args[1] if len(args) > 1 else kwargs.get("indent")
        width = len(indent) if isinstance(indent, str) else int(indent or 0)
        budget.charge(_size(value, budget.left) * (1 + width), what)  # the indent repeats once per nesting line


def _guard_filter(name: str, fn):
    from jinja2.utils import _PassArg

    skip = 1 if _PassArg.from_obj(fn) is not None else 0  # context / eval context / environment comes first

    @functools.wraps(fn)
    def guarded(*args, **kwargs):
        budget = _budget()
        args = list(args)
        if len(args) > skip:
            if name in ("join", "sum") and not isinstance(args[skip], (str, list, tuple)):
                args[skip] = _materialise(args[skip], budget)  # once: the precheck and the filter see the same items
            value, rest = args[skip], args[skip + 1 :]
            if name == "join" and not kwargs.get("attribute") and len(rest) <= 1:
                _precheck_join(list(value), str(rest[0] if rest else kwargs.get("d", "")), budget, f"filter '{name}'")
            elif name == "sum":
                attribute = rest[0] if rest else kwargs.get("attribute")
                start = rest[1] if len(rest) > 1 else kwargs.get("start", 0)
                if attribute is None and isinstance(start, (list, tuple)):
                    # Python's sum() concatenates sequences pairwise (quadratic time): build the result in one pass.
                    budget.charge(_size(value, budget.left) + _size(start, budget.left), f"filter '{name}'")
                    out = list(start)
                    for i, item in enumerate(value):
                        out.extend(item)
                        if i % TICK_EVERY == TICK_EVERY - 1:
                            budget.tick()
                    return type(start)(out)
            else:
                _precheck_filter(name, value, rest, kwargs, budget)
        result = fn(*args, **kwargs)
        if isinstance(result, _RESULTS):
            budget.charge(_size(result, budget.left), f"filter '{name}'")
        return result

    return guarded


def _materialise(iterable, budget: _Budget) -> list:
    """``list(iterable)`` with the clock checked as it goes (a lazy ``map`` / ``select`` chain runs here)."""
    items = []
    for item in iterable:
        items.append(item)
        if len(items) % TICK_EVERY == 0:
            budget.tick()
        if len(items) > MAX_ITEMS:
            raise _LimitExceeded(f"a sequence of over {MAX_ITEMS} items")
    return items


def _guard_iter(iterable):
    """Every template ``for`` loop iterates through this: the time limit is checked at each iteration."""
    budget = _budget()
    for item in iterable:
        budget.tick()
        yield item


def _guard_out(value):
    """Every output node (literal text included) is charged, also inside macros and ``{% set %}`` blocks."""
    budget = _budget()
    budget.charge(_size(value, budget.left) if not isinstance(value, str) else len(value), "the output")
    return value


def _guard_concat(*parts):
    """The ``~`` operator, with its size charged before joining."""
    budget = _budget()
    budget.charge(sum(_size(p, budget.left) for p in parts), "the '~' operator")
    return "".join(str(p) for p in parts)


_GUARDS = (_guard_iter, _guard_out, _guard_concat)


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    """transformers' chat-template ``tojson``: plain ``json.dumps`` (Jinja's escapes ``<>&'`` for HTML)."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    from datetime import datetime

    if not isinstance(fmt, str) or len(fmt) > 1000:
        raise _LimitExceeded("strftime_now(): expected a format string of at most 1000 characters")
    return datetime.now().strftime(fmt)


def _bounded_environment():
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from jinja2.visitor import NodeTransformer

    class BoundedSandbox(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "+", "**", "%"})

        def call_binop(self, context, operator, left, right):
            budget = _budget()
            what = f"the '{operator}' operator"
            if operator == "*":
                seq, n = (left, right) if isinstance(right, int) else (right, left)
                if isinstance(seq, _SEQUENCES) and isinstance(n, int):
                    budget.charge(_size(seq, budget.left) * max(n, 0), what)
                elif isinstance(left, int) and isinstance(right, int) \
                        and left.bit_length() + right.bit_length() > MAX_INT_BITS:
                    raise _LimitExceeded(f"{what}: integer result over {MAX_INT_BITS} bits")
            elif operator == "+":
                if isinstance(left, _SEQUENCES) and isinstance(right, _SEQUENCES):
                    budget.charge(_size(left, budget.left) + _size(right, budget.left), what)
            elif operator == "**":
                if isinstance(left, int) and isinstance(right, int) and abs(left) > 1 and right > 0 \
                        and right * abs(left).bit_length() > MAX_INT_BITS:
                    raise _LimitExceeded(f"{what}: {left} ** {right} has over {MAX_INT_BITS} bits")
            elif operator == "%" and isinstance(left, (str, *_BYTES)):
                values = list(right) if isinstance(right, tuple) else list(right.values()) \
                    if isinstance(right, dict) else [right]
                _precheck_format(left, values, budget, what)
            return super().call_binop(context, operator, left, right)

        def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 (jinja2's signature)
            budget = _budget()
            if __obj in _GUARDS:  # the guards check their own arguments
                return __context.call(__obj, *args, **kwargs)
            name = getattr(__obj, "__name__", type(__obj).__name__)
            owner = getattr(getattr(__obj, "__wrapped__", __obj), "__self__", None)
            if isinstance(owner, (str, *_BYTES)):
                if name == "join" and args:
                    items = _materialise(args[0], budget)
                    _precheck_join(items, owner, budget, "str.join()")
                    args = (items, *args[1:])
                else:
                    _precheck_str_method(owner, name, list(args), kwargs, budget)
            result = super().call(__context, __obj, *args, **kwargs)
            if isinstance(result, _RESULTS):
                budget.charge(_size(result, budget.left), f"{name}()")
            return result

    class Guards(NodeTransformer):
        """Route loops, output and ``~`` through the guards (the compiled template calls them as globals)."""

        def _call(self, name: str, args: list, lineno: int):
            return nodes.Call(nodes.Name(name, "load", lineno=lineno), args, [], None, None, lineno=lineno)

        def visit_For(self, node):
            node = self.generic_visit(node)
            node.iter = self._call(_GUARD_ITER, [node.iter], node.lineno)
            return node

        def visit_Output(self, node):
            node = self.generic_visit(node)
            node.nodes = [self._call(_GUARD_OUT, [child], child.lineno) for child in node.nodes]
            return node

        def visit_Concat(self, node):
            node = self.generic_visit(node)
            return self._call(_GUARD_CONCAT, list(node.nodes), node.lineno)

    class GenerationBlock(Extension):
        """``{% generation %}...{% endgeneration %}`` (transformers marks assistant text with it): renders the body."""

        tags = {"generation"}

        def parse(self, parser):
            next(parser.stream)
            return parser.parse_statements(("name:endgeneration",), drop_needle=True)

    # The environment transformers renders chat templates in (so a template gives the text the model was trained
    # on): loop controls, the generation tag, tojson without HTML escaping, strftime_now.
    env = BoundedSandbox(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols, GenerationBlock])
    env.filters["tojson"] = _tojson
    env.filters = {name: _guard_filter(name, fn) for name, fn in env.filters.items()}
    env.globals.pop("lipsum", None)  # n paragraphs of filler text: nothing a chat template needs
    env.globals["strftime_now"] = _strftime_now
    env.globals.update({_GUARD_ITER: _guard_iter, _GUARD_OUT: _guard_out, _GUARD_CONCAT: _guard_concat})
    return env, Guards()


# ------------------------------------------------------------------------------------------------------ tokenizer
def _read_json_object(path: Path) -> dict | None:
    """A tokenizer JSON file (None if absent): a regular file, bounded in bytes and depth (runtime/loader/files.py)."""
    return read_json_object(path, TokenizerFileError, MAX_CONFIG_BYTES, what=path.name)


def _read_text(path: Path, limit: int) -> str | None:
    data = read_bytes(path, limit, TokenizerFileError, what=path.name)
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TokenizerFileError(f"{path}: not UTF-8 text: {e.reason} at byte {e.start}") from None


class Tokenizer:
    def __init__(self, tokenizer: _HFTokenizer, config: dict, chat_template: str | None = None,
                 template_source: str = "tokenizer_config.json"):
        self.tok = tokenizer
        self.config = config
        self.chat_template = chat_template  # None: tokenizer_config.json's, read at first use (only --chat needs it)
        self.template_source = template_source
        self._compiled = None

    @classmethod
    def from_checkpoint(cls, directory: str | Path) -> "Tokenizer | None":
        directory = Path(directory)
        path = directory / "tokenizer.json"
        # Every file is checked to be a regular file before it is opened (a FIFO would block the open, /dev/zero
        # the read) and read with a byte bound; tokenizer.json is then parsed from memory, never opened by tokenizers.
        text = _read_text(path, MAX_TOKENIZER_BYTES)
        if text is None:
            return None
        cfg_path = directory / "tokenizer_config.json"
        config = _read_json_object(cfg_path) or {}
        try:
            tok = _HFTokenizer.from_str(text)
        except Exception as e:  # tokenizers raises its own Exception type for malformed files
            raise TokenizerFileError(f"{path}: not a valid tokenizers file: {_one_line(e)}") from None
        del text
        # transformers v5 saves the template beside the config; it takes precedence there too.
        jinja_path = directory / "chat_template.jinja"
        template = _read_text(jinja_path, MAX_CONFIG_BYTES)
        if template is not None:
            return cls(tok, config, template, str(jinja_path))
        return cls(tok, config, None, str(cfg_path))

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        # encode_batch, not encode: the same ids, but it releases the GIL while the Rust tokenizer runs, so a long
        # prompt tokenized in a server thread does not stall the event loop (encode holds it throughout).
        return self.tok.encode_batch([text], add_special_tokens=add_special_tokens)[0].ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.tok.decode(ids, skip_special_tokens=skip_special_tokens)

    def _special(self, key: str) -> str:
        value = self.config.get(key)
        return value.get("content", "") if isinstance(value, dict) else (value if isinstance(value, str) else "")

    def _fail(self, what: str, detail: Any) -> ChatTemplateError:
        return ChatTemplateError(f"{self.template_source}: chat template {what}: {_one_line(detail)}")

    def _template(self):
        if self._compiled is None:
            from jinja2 import TemplateSyntaxError

            text = self.chat_template
            if text is None:
                text = _template_from_config(self.config, self.template_source)
            if not text:
                raise ChatTemplateError(f"{self.template_source}: the checkpoint has no chat_template")
            if len(text) > MAX_TEMPLATE_CHARS:
                raise self._fail("is too long", f"{len(text)} characters, limit {MAX_TEMPLATE_CHARS}")
            env, guards = _bounded_environment()
            try:
                self._compiled = env.from_string(guards.visit(env.parse(text)))
            except TemplateSyntaxError as e:
                raise self._fail("syntax error", f"line {e.lineno}: {e.message}") from None
            except RecursionError:
                raise self._fail("is nested too deeply", "parser recursion limit reached") from None
        return self._compiled

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True, *,
                            time_limit: float = RENDER_SECONDS) -> str:
        from jinja2.exceptions import SecurityError, TemplateError, UndefinedError

        template = self._template()

        def raise_exception(message: str) -> None:
            raise ChatTemplateError(f"{self.template_source}: chat template raised an error: {_one_line(message)}")

        input_chars = len(json.dumps(messages, default=str))
        token = _BUDGET.set(_Budget(max(RENDER_CHARS, 16 * input_chars), time_limit))
        failure: ChatTemplateError | None = None
        # The render function itself, not template.generate(): generate() hands errors to Jinja's traceback
        # rewriting, whose fake frames keep copies of the template's variables in reference cycles.
        context = template.new_context({
            "messages": messages, "add_generation_prompt": add_generation_prompt,
            "bos_token": self._special("bos_token"), "eos_token": self._special("eos_token"),
            "raise_exception": raise_exception,
        })
        try:
            return "".join(template.root_render_func(context))
        # Each error is rebuilt from its message and raised after the except block, once the failed render's frames
        # are cleared (_release): an exception keeps every frame of its traceback alive, and with them whatever the
        # template built (a failed 3 GB bomb kept 3 GB per request until the garbage collector ran).
        except ChatTemplateError as e:
            failure = ChatTemplateError(str(e))
            _release(e)
        except _LimitExceeded as e:
            failure = self._fail("exceeded a render limit", e)
            _release(e)
        except SecurityError as e:
            failure = self._fail("attempted an unsafe operation", e)
            _release(e)
        except UndefinedError as e:
            failure = self._fail("uses an undefined value", e)
            _release(e)
        except TemplateError as e:
            failure = self._fail("failed", e)
            _release(e)
        except RecursionError as e:
            failure = self._fail("recursed too deeply", "Python's recursion limit was reached")
            _release(e)
        except MemoryError as e:
            failure = self._fail("ran out of memory", "MemoryError")
            _release(e)
        except Exception as e:  # TypeError, ValueError, ZeroDivisionError, OverflowError from template expressions
            failure = self._fail("failed", f"{type(e).__name__}: {e}")
            _release(e)
        finally:
            _BUDGET.reset(token)
            # A macro's closure and the context refer to each other (a cycle the garbage collector alone frees):
            # emptied here, the cycle no longer holds what the template built.
            context.vars.clear()
            context.exported_vars.clear()
            context = None  # (the raised error's traceback holds this frame: nothing big may stay in it)
        try:
            raise failure
        finally:
            failure = None  # the frame would hold the error that holds the frame: a cycle kept until a gc run

    def has_chat_template(self) -> bool:
        """Whether the checkpoint ships a chat template (chat_template.jinja or tokenizer_config.json's field); a
        malformed field raises TokenizerFileError here, as using it would."""
        if self.chat_template is not None:
            return bool(self.chat_template)
        return bool(_template_from_config(self.config, self.template_source))

    def encode_chat(self, user_message: str) -> list[int]:
        """One user turn rendered with the chat template (special tokens come from the template text)."""
        return self.encode(self.apply_chat_template([{"role": "user", "content": user_message}]), add_special_tokens=False)


def _template_from_config(config: dict, source: str) -> str | None:
    """``chat_template`` of tokenizer_config.json: a string, or a list of ``{name, template}`` (``default`` wins)."""
    value = config.get("chat_template")
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(t, dict) and isinstance(t.get("template"), str) for t in value):
        named = {t.get("name"): t["template"] for t in value}
        return named.get("default", value[0]["template"] if value else None)
    raise TokenizerFileError(f"{source}: field 'chat_template': expected a string or a list of "
                             f"{{name, template}} objects, got {type(value).__name__}")
