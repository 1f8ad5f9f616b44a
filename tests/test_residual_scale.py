"""The ``residual_scale`` spec vocabulary (codegen/schema.py ResidualScaleSpec) beyond MiniMax's use of it
(tests/test_parity_minimax.py: ``stream: normed``, per-block factors): the ``input`` stream (muP-style multipliers,
as Falcon-H1 would use them) on a Llama spec against transformers' Llama with the same joins hooked in, on rocm and
neuron; and the located errors for layouts it does not apply to.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from modelgen.cli.verify import rendered_modules
from modelgen.codegen.errors import SpecError
from modelgen.codegen.lower import compile_spec
from modelgen.runtime.engine.llm import LLM
from modelgen.runtime.testing.tiny_models import make_tiny_checkpoint, tiny_prompt
from tests.parity_helpers import hf_logits

SPECS = Path(__file__).resolve().parent.parent / "specs"
PROMPT = tiny_prompt()
# (stream factor, output factor) of the attention's and the MLP's join
ATTN, MLP = (0.8, 0.5), (1.1, 2.0)
SCALED = f"""
    residual_scale:
      stream: input
      attention: {{residual: {ATTN[0]}, output: {ATTN[1]}}}
      mlp: {{residual: {MLP[0]}, output: {MLP[1]}}}
    mlp_norm: {{name: post_attention_layernorm"""


def _spec(tmp_path: Path, old: str, new: str, base: str = "llama.yaml") -> Path:
    tmp_path.mkdir(exist_ok=True)
    for other in SPECS.glob("*.yaml"):  # the bases a spec extends
        (tmp_path / other.name).write_text(other.read_text())
    text = (SPECS / base).read_text()
    assert old in text, old
    p = tmp_path / base
    p.write_text(text.replace(old, new, 1))
    return p


def _hook_joins(hf) -> None:
    """transformers' Llama with each join ``x * residual + f(norm(x)) * output``: the sub-layer's output becomes
    ``output * f + (residual - 1) * x``, ``x`` the norm's input, and HF's own add completes the join."""
    for layer in hf.model.layers:
        for norm, sub, (a, b) in ((layer.input_layernorm, layer.self_attn, ATTN),
                                  (layer.post_attention_layernorm, layer.mlp, MLP)):
            seen = {}
            norm.register_forward_pre_hook(lambda _m, args, seen=seen: seen.__setitem__("x", args[0]))

            def scale(_m, _args, out, seen=seen, a=a, b=b):
                if isinstance(out, tuple):
                    return (out[0] * b + (a - 1) * seen["x"], *out[1:])
                return out * b + (a - 1) * seen["x"]

            sub.register_forward_hook(scale)


@pytest.mark.parametrize("target", ["rocm", "neuron"])
def test_input_stream_scaling_matches_hooked_transformers(tmp_path, target):
    spec = _spec(tmp_path / "specs", "\n    mlp_norm: {name: post_attention_layernorm", SCALED)
    hf = make_tiny_checkpoint(tmp_path / "ckpt", "LlamaForCausalLM", initializer_range=0.1)
    plain = hf_logits(hf, PROMPT)
    _hook_joins(hf)
    ref = hf_logits(hf, PROMPT)
    assert (ref - plain).abs().max().item() > 1e-2  # the joins change this model's logits
    with rendered_modules(spec, (target,)) as modules:
        llm = LLM(tmp_path / "ckpt", target=target, dtype="float32", max_model_len=128, module=modules[target])
        err = (llm.score(PROMPT).float() - ref).abs().max().item()
    assert err < 1e-4, err


def test_residual_scale_outside_serial_pre_norm_is_refused(tmp_path):
    spec = _spec(tmp_path, "\n    residual: post_norm", "\n    residual: post_norm\n    residual_scale: {stream: normed}",
                 base="olmo2.yaml")
    with pytest.raises(SpecError, match=r"residual_scale applies to a serial pre_norm layer"):
        compile_spec(spec)


def test_residual_scale_with_residual_multiplier_is_refused(tmp_path):
    spec = _spec(tmp_path, "\n    mlp_norm: {name: post_attention_layernorm",
                 "\n    residual_multiplier: 0.5" + SCALED)
    with pytest.raises(SpecError, match=r"without residual_multiplier"):
        compile_spec(spec)


def test_one_stream_for_every_block(tmp_path):
    """One decoder-layer class serves every block: the factors may differ, the stream (and presence) may not."""
    old = """      attention: {residual: linear_attn_alpha_factor, output: linear_attn_beta_factor}"""
    spec = _spec(tmp_path, "      stream: normed\n" + old, "      stream: input\n" + old, base="minimax.yaml")
    with pytest.raises(SpecError, match=r"residual_scale must be given in every block or none, with one stream"):
        compile_spec(spec)
    ir = compile_spec(SPECS / "minimax.yaml")
    full, linear = (b.residual_scale for b in ir.blocks)
    assert full.attention != linear.attention and full.mlp == linear.mlp and full.normed and linear.normed
