"""Shared pieces of the GPU kernel tests (tests/test_gpu_*.py): where they run and how they compare.

The kernel tests run on a CUDA GPU, or on the CPU through Triton's interpreter with ``TRITON_INTERPRET=1
MODELGEN_TRITON_ON_CPU=1`` (``DEV`` is then "cpu"). ``LOW`` is the 16-bit dtype of the low-precision cases: bfloat16 on a
GPU, float16 in the interpreter (Triton 3.6's interpreter truncates float32 -> bfloat16 instead of rounding, and its
bfloat16 ``tl.dot`` is wrong), so the same tests check the same kernels in both places.
"""
from __future__ import annotations

import os

import pytest
import torch

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1" and os.environ.get("MODELGEN_TRITON_ON_CPU") == "1"
DEV = "cuda" if torch.cuda.is_available() else "cpu"
LOW = torch.bfloat16 if torch.cuda.is_available() else torch.float16

# module-level marks of a kernel test file: skipped without a GPU unless interpreting
KERNEL_MARKS = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() and not INTERPRET, reason="needs a CUDA GPU"),
]
cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (not the interpreter)")


def subprocess_env(*front: str) -> dict[str, str]:
    """``os.environ`` for a child process with ``front`` put before the caller's ``PYTHONPATH``, which is kept: on
    the device machine that path holds the wheels carried there (pydantic, ...), so replacing it broke the child's
    imports. No empty entry is left when the caller has none (an empty entry would put the child's cwd on the path)."""
    parts = [*front, *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(parts)}


def count_calls(monkeypatch, module, name: str) -> dict[str, int]:
    """Replace ``module.name`` with a wrapper that counts its calls (``"calls"``) and those made while a CUDA graph
    was being captured (``"captured"``): the engine tests' proof that a kernel ran, inside the decode graphs."""
    counts = {"calls": 0, "captured": 0}
    real = getattr(module, name)

    def counting(*a, **kw):
        counts["calls"] += 1
        counts["captured"] += torch.cuda.is_current_stream_capturing()
        return real(*a, **kw)

    monkeypatch.setattr(module, name, counting)
    return counts


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """``||a - b|| / ||b||`` in float64; ``a`` must be finite (NaN never passes)."""
    a, b = a.double(), b.double()
    assert torch.isfinite(a).all()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def _interpreter_loop_bounds() -> None:
    """Triton 3.6's interpreter turns a loop bound that is a kernel value (a loaded scalar, an int argument) into
    ``int(ndarray)``, which numpy >= 2.4 refuses for 1-element arrays: take the element, so the kernels' runtime-bound
    loops (attention, MoE align) also run under the interpreter. Interpreter-only; compiled kernels are untouched."""
    try:
        import triton.runtime.interpreter as ti
    except Exception:
        return
    original = ti._patch_lang_tensor
    if getattr(original, "_modelgen_loop_bounds", False):
        return

    def patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    patched._modelgen_loop_bounds = True
    ti._patch_lang_tensor = patched


if INTERPRET:
    _interpreter_loop_bounds()


def assert_kept_matches_dequantized(kept, deq, kept_logits: torch.Tensor, prompt, gen_prompt, what: str,
                                    tol: float = 1e-4) -> None:
    """The engine with quantized weights kept (``kept``, whose ``score(prompt)`` gave ``kept_logits``) against the
    dequantize-at-load engine ``deq``: logits within ``tol`` (fp32: summation order only, see the test modules'
    docstrings) and 8 greedy tokens from ``gen_prompt`` equal."""
    from modelgen import SamplingParams

    err = (kept_logits - deq.score(prompt).float()).abs().max().item()
    assert err < tol, f"{what}-kept logits differ from the dequantized path by {err}"
    params = SamplingParams(max_new_tokens=8, ignore_eos=True)
    assert kept.generate([gen_prompt], params) == deq.generate([gen_prompt], params)


def assert_graph_replays_match_eager(fn, inputs, replays: int = 2) -> None:
    """Decode steps replay captured graphs: ``fn(*inputs())`` (one tensor or a tuple) is run eagerly once (compiles
    outside the capture), captured in a CUDA graph (no host sync allowed), then ``replays`` times fresh ``inputs()``
    are copied into the captured input tensors and the replay's outputs must equal an eager ``fn`` on them bitwise."""
    args = inputs()
    fn(*args)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(*args)
    outs = out if isinstance(out, tuple) else (out,)
    for _ in range(replays):
        new = inputs()
        for t, n in zip(args, new):
            t.copy_(n)
        graph.replay()
        torch.cuda.synchronize()
        want = fn(*new)
        for i, (o, w) in enumerate(zip(outs, want if isinstance(want, tuple) else (want,))):
            assert torch.equal(o, w), f"output {i}: the graph replay differs from an eager call on the same inputs"
