"""Debugging hooks to find where a model diverges from its reference (the Neuron guide's ``tensor_capture`` /
``tensor_replacement``), for any ``nn.Module``: generated rocm and neuron models and transformers models alike.

* :func:`tensor_capture` records module outputs (and optionally inputs) by module name during a forward;
* :func:`tensor_replacement` substitutes a module's output (a tensor, or a function of the output), e.g. inject the
  reference's layer-k output to see whether the layers after k agree: if downstream then matches, the divergence is
  at or before layer k; if not, it is after. :func:`first_divergence` walks matched captures to name the first
  module over a tolerance.

Both are forward hooks, so they work in eager mode (``LLM(..., compile=False)``, the default); hooks are not part
of a ``torch.compile`` graph that was traced without them.

Conventions the helpers handle:
  * rocm decoder layers return ``(hidden, residual)`` and the next norm adds them (fused residual add), so the
    layer's value in HF terms is ``hidden + residual``; :func:`layer_output` and :func:`replace_layer_output`
    know this, plain tensors pass through;
  * the neuron runner pads tokens to a bucket, so neuron activations have padding rows after the real tokens. A
    replacement tensor with fewer rows than the output replaces the leading rows and keeps the padding rows.
"""
from __future__ import annotations

import difflib
import functools
import re
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch
from torch import nn

__all__ = [
    "Captures",
    "first_divergence",
    "layer_output",
    "replace_layer_output",
    "resolve_modules",
    "tensor_capture",
    "tensor_replacement",
]


def _is_pattern(s: str) -> bool:
    return "*" in s or "?" in s


def _pattern_regex(pattern: str) -> re.Pattern:
    """Dotted-name glob: ``*`` matches within one name segment (``model.layers.*`` is the layers, not their
    children), ``**`` across segments (``model.**.mlp``), ``?`` one character other than a dot."""
    out = []
    for part in re.split(r"(\*\*|\*|\?)", pattern):
        out.append({"**": ".*", "*": "[^.]*", "?": "[^.]"}.get(part, re.escape(part)))
    return re.compile("".join(out) + r"\Z")


def resolve_modules(model: nn.Module, names_or_patterns: str | Sequence[str]) -> dict[str, nn.Module]:
    """Module names (``model.layers.0.mlp``) or dotted globs (``model.layers.*.self_attn``) -> {name: module},
    in the model's module order. An exact name that does not exist or a pattern that matches nothing is an error
    naming the closest module names."""
    if isinstance(names_or_patterns, str):
        names_or_patterns = [names_or_patterns]
    modules = dict(model.named_modules())
    chosen: set[str] = set()
    for item in names_or_patterns:
        if _is_pattern(item):
            rx = _pattern_regex(item)
            hits = [n for n in modules if rx.match(n)]
        else:
            hits = [item] if item in modules else []
        if not hits:
            close = difflib.get_close_matches(item, list(modules), n=3, cutoff=0.5)
            hint = f"; closest: {', '.join(close)}" if close else ""
            raise KeyError(f"{type(model).__name__} has no module matching {item!r}{hint}")
        chosen.update(hits)
    return {n: m for n, m in modules.items() if n in chosen}


def _detached(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    if isinstance(x, (tuple, list)):
        return type(x)(_detached(v) for v in x)
    return x


@contextmanager
def _forward_hooks(modules: Mapping[str, nn.Module], hook: Callable[..., Any]) -> Iterator[None]:
    """``hook(name, module, args, output)`` on every named module while the block runs; always removed after."""
    handles = [m.register_forward_hook(functools.partial(hook, name)) for name, m in modules.items()]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


class Captures(dict):
    """``name -> [output of call 1, output of call 2, ...]`` (tensors detached and cloned; tuples kept as tuples).
    ``inputs`` holds the positional inputs the same way when the capture was asked for them."""

    def __init__(self):
        super().__init__()
        self.inputs: dict[str, list[tuple]] = {}

    def one(self, name: str) -> Any:
        """The output of the only call of ``name`` (an error if it ran zero or several times)."""
        calls = self.get(name)
        if calls is None:
            raise KeyError(f"{name!r} was not captured (captured: {', '.join(self) or 'nothing'})")
        if len(calls) != 1:
            raise ValueError(f"{name!r} ran {len(calls)} times; index captures[{name!r}][i] for one call")
        return calls[0]


@contextmanager
def tensor_capture(
    model: nn.Module, names_or_patterns: str | Sequence[str], *, inputs: bool = False
) -> Iterator[Captures]:
    """Record the outputs of the named modules for every forward run inside the ``with`` block::

        with tensor_capture(llm.model, ["model.layers.*"]) as cap:
            llm.score(prompt)
        h0 = layer_output(cap.one("model.layers.0"))
    """
    cap = Captures()
    modules = resolve_modules(model, names_or_patterns)
    for name in modules:
        cap[name] = []
        if inputs:
            cap.inputs[name] = []

    def hook(name, mod, args, out):
        cap[name].append(_detached(out))
        if inputs:
            cap.inputs[name].append(_detached(tuple(args)))

    with _forward_hooks(modules, hook):
        yield cap


def _replace_tensor(name: str, out: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    value = value.to(device=out.device, dtype=out.dtype)  # e.g. an fp32 reference injected into a bf16 model
    if value.shape == out.shape:
        return value
    if value.dim() == out.dim() and value.shape[1:] == out.shape[1:] and value.shape[0] < out.shape[0]:
        # Bucket padding (neuron): the real tokens come first; the padding rows keep what the model computed.
        new = out.clone()
        new[: value.shape[0]] = value
        return new
    raise ValueError(
        f"tensor_replacement: module {name!r} output has shape {tuple(out.shape)}, replacement "
        f"{tuple(value.shape)} (expected the same shape, or fewer leading rows)"
    )


def _apply(name: str, out: Any, value: Any) -> Any:
    if callable(value) and not isinstance(value, torch.Tensor):
        return value(out)
    if isinstance(value, torch.Tensor):
        if isinstance(out, (tuple, list)):
            raise TypeError(
                f"tensor_replacement: module {name!r} returns a {len(out)}-{type(out).__name__}, not a tensor; "
                f"pass a tuple (None keeps an element) or a callable such as replace_layer_output(t)"
            )
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"tensor_replacement: module {name!r} returns {type(out).__name__}, not a tensor")
        return _replace_tensor(name, out, value)
    if isinstance(value, (tuple, list)):
        if not isinstance(out, (tuple, list)) or len(out) != len(value):
            raise ValueError(
                f"tensor_replacement: module {name!r} returns {type(out).__name__}, replacement is a "
                f"{len(value)}-tuple (expected a tuple of the same length)"
            )
        return type(out)(o if v is None else _apply(f"{name}[{i}]", o, v) for i, (o, v) in enumerate(zip(out, value)))
    raise TypeError(f"tensor_replacement: replacement for {name!r} is {type(value).__name__}; "
                    f"expected a tensor, a tuple or a callable")


@contextmanager
def tensor_replacement(
    model: nn.Module, replacements: Mapping[str, torch.Tensor | tuple | Callable[[Any], Any]]
) -> Iterator[dict[str, int]]:
    """Substitute module outputs for every forward inside the ``with`` block; yields ``{name: times applied}``
    so a test can check the substitution actually happened.

    A value is a tensor (the new output; shape-checked, cast to the output's dtype, fewer leading rows allowed for
    padded buckets), a tuple for tuple outputs (``None`` keeps that element), or ``fn(output) -> new output``.
    Names are exact module names (no patterns: each replacement is specific to one module).
    """
    bad = [n for n in replacements if _is_pattern(n)]
    if bad:
        raise KeyError(f"tensor_replacement takes exact module names, not patterns: {bad}")
    modules = resolve_modules(model, list(replacements))
    applied = {name: 0 for name in modules}

    def hook(name, mod, args, out):
        applied[name] += 1
        return _apply(name, out, replacements[name])

    with _forward_hooks(modules, hook):
        yield applied


# ------------------------------------------------------------------------------------------------ layer conventions
def layer_output(out: Any) -> torch.Tensor:
    """A decoder layer's output as HF defines it: ``hidden + residual`` for the rocm layers' fused-residual pair
    (``residual`` is None only before the first norm), the tensor itself otherwise."""
    if isinstance(out, (tuple, list)):
        if len(out) != 2:
            raise ValueError(f"layer_output: expected a (hidden, residual) pair, got a {len(out)}-tuple")
        hidden, residual = out
        return hidden if residual is None else hidden + residual
    return out


def replace_layer_output(value: torch.Tensor) -> Callable[[Any], Any]:
    """A replacement making a decoder layer output ``value`` in HF terms, on either target: a plain tensor for
    neuron/HF layers, ``(value, 0)`` for a rocm ``(hidden, residual)`` pair (the next norm adds the two, so the
    stream is exactly ``value``)."""

    def fn(out: Any) -> Any:
        if isinstance(out, (tuple, list)):
            hidden = _replace_tensor("decoder layer", layer_output(out), value)
            return type(out)((hidden, torch.zeros_like(hidden)))
        return _replace_tensor("decoder layer", out, value)

    return fn


def first_divergence(
    ours: Captures, reference: Captures, pairs: Sequence[tuple[str, str]], *, atol: float,
    rows: int | None = None, convert: Callable[[Any], torch.Tensor] = layer_output,
) -> tuple[str | None, list[tuple[str, float]]]:
    """Compare captured outputs pairwise in order (``[(our_name, reference_name), ...]``, e.g. layer by layer) and
    return ``(first our_name whose max |diff| > atol or None, [(our_name, max |diff|), ...])``. ``rows`` keeps the
    leading rows only (drop neuron bucket padding); ``convert`` turns an output into a tensor (default:
    :func:`layer_output`). Reference tensors may carry a batch dimension of 1 (HF ``[1, T, H]``)."""
    table: list[tuple[str, float]] = []
    first = None
    for ours_name, ref_name in pairs:
        a = convert(ours.one(ours_name)).float()
        b = convert(reference.one(ref_name)).float()
        if b.dim() == a.dim() + 1 and b.shape[0] == 1:
            b = b[0]
        if rows is not None:
            a, b = a[:rows], b[:rows]
        if a.shape != b.shape:
            raise ValueError(f"first_divergence: {ours_name} {tuple(a.shape)} vs {ref_name} {tuple(b.shape)}")
        diff = (a - b).abs().max().item()
        table.append((ours_name, diff))
        if first is None and not diff <= atol:
            first = ours_name
    return first, table
