"""codegen/render.py's split of a too-long list comprehension argument: element and clauses taken from libcst nodes
(the old string split on the element's ast source segment broke on a parenthesised element)."""
from __future__ import annotations

import ast

import pytest

from modelgen.codegen.render import MAX_LINE, _call, _split_arg

LONG = "checkpoint_tensor_names_of_the_layer_" * 3


@pytest.mark.parametrize("comp", [
    f"[x for x in {LONG}]",
    f"[(x.weight) for x in {LONG} if x]",                     # ast's segment of the element drops the parentheses
    f"[f(k, 'k') for k, v in {LONG}.items() if k != 'k' for _ in v]",  # the element's text again in the clauses
    f"[ (a, b)  for a, b in zip({LONG}, {LONG}) ]",           # spaces inside the brackets
    f"[[y for y in x] for x in {LONG}]",                      # a comprehension as the element
])
def test_split_comprehension_is_the_same_expression_on_three_lines(comp):
    out = _split_arg(comp, 8)
    lines = out.split("\n")
    assert len(lines) == 4 and lines[0] == "[" and lines[-1] == " " * 8 + "]"
    assert lines[2].lstrip().startswith("for ")
    assert ast.dump(ast.parse(out, mode="eval")) == ast.dump(ast.parse(comp, mode="eval"))


def test_short_arguments_and_other_expressions_are_unchanged():
    assert _split_arg("[x for x in y]", 8) == "[x for x in y]"
    call = f"f({LONG}, {LONG}, {LONG})"
    assert _split_arg(call, 8) == call


def test_call_splits_a_long_comprehension_argument_to_fit():
    names = "checkpoint_tensor_names_of_the_layer_" * 2  # the call is too long, each clause fits
    text = _call("names = tuple", [f"[name.replace('.', '_') for name in {names} if name]"], 4)
    assert text.count("\n") == 5
    compile(text.strip(), "<generated>", "exec")
    assert max(map(len, text.split("\n"))) <= MAX_LINE
