"""The spec expression language: whitelist, evaluation, and rendering to Python source."""
from __future__ import annotations

import pytest

from modelgen.codegen.expr import ExprError, parse_expr


@pytest.mark.parametrize(
    "text, env, value",
    [
        ("hidden_size // num_attention_heads", {"hidden_size": 64, "num_attention_heads": 4}, 16),
        ("min(a, b) + max(a, b) * 2", {"a": 3, "b": 5}, 13),
        ("'sparse' if (i + 1) % step == 0 and i not in dense else 'dense'", {"i": 3, "step": 2, "dense": [1]}, "sparse"),
        ("'sparse' if (i + 1) % step == 0 and i not in dense else 'dense'", {"i": 1, "step": 2, "dense": [1]}, "dense"),
        ("layer_types[i] == 'full_attention'", {"layer_types": ["linear", "full_attention"], "i": 1}, True),
        ("int(head_dim * 0.5)", {"head_dim": 128}, 64),
        ("-x ** 2", {"x": 3}, -9),
        ("1e-6", {}, 1e-6),
        (True, {}, True),
    ],
)
def test_evaluates(text, env, value):
    assert parse_expr(text).evaluate(env) == value


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("__import__('os')", "only calls to"),
        ("x.__class__", "'Attribute' is not allowed"),
        ("(lambda: 1)()", "only calls to"),
        ("lambda: 1", "'Lambda' is not allowed"),
        ("[i for i in range(3)]", "not allowed"),
        ("open('f')", "only calls to"),
        ("min(a, key=b)", "keyword arguments"),
        ("a +", "invalid expression"),
    ],
)
def test_rejects(text, fragment):
    with pytest.raises(ExprError, match=fragment):
        parse_expr(text)


def test_names_and_rendering():
    e = parse_expr("max(hidden_size // heads, 1)")
    assert e.names == {"hidden_size", "heads"}
    assert e.to_python(lambda n: f"config.{n}") == "max(config.hidden_size // config.heads, 1)"


def test_undefined_name_at_evaluation():
    with pytest.raises(ExprError, match="undefined name 'nope'"):
        parse_expr("nope + 1").evaluate({})
