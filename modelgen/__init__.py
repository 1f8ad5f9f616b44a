"""modelgen: a declarative model-definition compiler for LLM inference.

The repository keeps its code folders at the top (``codegen/``, ``runtime/``, ``generated/``, ``cli/``); they are
imported as ``modelgen.codegen``, ``modelgen.runtime``, ``modelgen.generated`` and ``modelgen.cli`` so that
installing modelgen never shadows the unrelated PyPI packages named ``codegen``/``runtime`` (or a user's own
``generated``). A wheel places them physically
under ``modelgen/`` (``[tool.setuptools.package-dir]`` in pyproject.toml); in a source checkout or an editable install
this package's search path is extended with the repository root, which holds them.

Public Python API::

    from modelgen import LLM, SamplingParams  # and RequestOutput, CompletionOutput, StreamDelta (what generate/chat/stream return)

(README.md, "Python API"). This package's own modules sit below everything else: ``settings.py`` (every
``MODELGEN_*`` variable) and ``targets.py`` (the list of targets), standard library only, which the compiler and the
runtime both import.
"""
from __future__ import annotations

from pathlib import Path as _Path

_here = _Path(__file__).resolve().parent
if not (_here / "runtime").is_dir() and (_here.parent / "runtime" / "__init__.py").is_file():
    # Source checkout / editable install: modelgen.runtime is <repo>/runtime, and so on. Only the code folders
    # are meant to be imported through this path (tests/, bench/ are not packages of modelgen).
    __path__.append(str(_here.parent))  # type: ignore[name-defined]

__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "Logprob", "RequestStats", "StreamDelta"]


def __getattr__(name: str):
    # Lazy: `import modelgen` (e.g. by the `modelgen build` command) must not import torch.
    if name == "LLM":
        from modelgen.runtime.engine.llm import LLM

        return LLM
    if name == "SamplingParams":
        from modelgen.runtime.engine.sampler import SamplingParams

        return SamplingParams
    if name in ("RequestOutput", "CompletionOutput", "Logprob", "RequestStats", "StreamDelta"):
        from modelgen.runtime.engine import outputs

        return getattr(outputs, name)
    raise AttributeError(f"module 'modelgen' has no attribute {name!r}")
