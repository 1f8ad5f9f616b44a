"""`modelgen run`'s header coverage pre-check builds the model on the meta device: its RoPE tables must cost nothing
there (computing them under the meta device's function mode imported torch._dynamo and took seconds)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CODE = """
import sys, torch
from modelgen.runtime.layers.rotary import RotaryEmbedding
with torch.device("meta"):
    rope = RotaryEmbedding(64, 32, 8192, 10000.0, {"rope_type": "dynamic", "factor": 2.0}, "rotate_half")
assert rope.cos_sin_cache.is_meta and tuple(rope.cos_sin_cache.shape) == (16384, 32), rope.cos_sin_cache
assert rope.cos_sin_cache.dtype == torch.float32
assert "torch._dynamo" not in sys.modules, "a meta build imported torch._dynamo"
real = RotaryEmbedding(64, 32, 128, 10000.0, None, "rotate_half")
assert not real.cos_sin_cache.is_meta and float(real.cos_sin_cache[0, 0]) == 1.0  # cos(0): values off meta
print("ok")
"""


def test_meta_rope_tables_are_shapes_only():
    r = subprocess.run([sys.executable, "-c", CODE], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
