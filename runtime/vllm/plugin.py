"""modelgen's vLLM plugin: registers the generated ``generated/vllm/`` models with vLLM's model registry.

Declared as the ``vllm.general_plugins`` entry point ``modelgen`` (pyproject.toml), so ``pip install modelgen`` in a
vLLM environment is all it takes; vLLM calls :func:`register` in every process it starts. This module imports
neither torch nor the generated models: registration is lazy (``"module:Class"`` strings).

Which architectures modelgen serves is set by ``MODELGEN_VLLM_MODELS``:

``missing`` (default)
    only architectures vLLM has no class for (a newly onboarded spec);
``all``
    every architecture a spec names, overriding vLLM's own classes;
``Arch1,Arch2``
    exactly those HF architecture names (each must be one a spec names).

A bad value is refused in one line. A model vLLM builds for an architecture modelgen claimed must be modelgen's
class: :func:`register` wraps vLLM's model-class resolution so that a fallback to another class (vLLM's native model,
or its Transformers backend through ``--model-impl``) is an error, not a silent substitution.
"""
from __future__ import annotations

import importlib

from modelgen import settings

ENV = "MODELGEN_VLLM_MODELS"
GENERATED = "modelgen.generated.vllm"

_claimed: dict[str, str] = {}  # architecture -> "module:Class" modelgen registered (this process)


class PluginConfigError(ValueError):
    """A bad MODELGEN_VLLM_MODELS value (one line)."""


def generated_models() -> dict[str, str]:
    """HF architecture -> generated vllm package name (generated/vllm/__init__.py, literal data)."""
    return dict(importlib.import_module(GENERATED).MODELS)


def class_path(package: str) -> str:
    """``"module:Class"`` of a generated vllm package's model (its __init__ imports config.py only, no vLLM)."""
    return importlib.import_module(f"{GENERATED}.{package}").MODEL_CLASS_PATH


def selected(value: str | None, available: dict[str, str], native: set[str]) -> dict[str, str]:
    """The entries of ``available`` (architecture -> package) ``MODELGEN_VLLM_MODELS=value`` selects (``native``:
    the architectures vLLM has its own class for)."""
    choice = "missing" if value is None else value.strip()
    if choice == "missing":
        return {a: p for a, p in available.items() if a not in native}
    if choice == "all":
        return dict(available)
    names = [n.strip() for n in choice.split(",")]
    if not choice or any(not n for n in names):
        raise PluginConfigError(f"{ENV}={value!r}: expected 'missing', 'all' or a comma list of HF architecture names")
    unknown = [n for n in names if n not in available]
    if unknown:
        raise PluginConfigError(f"{ENV}={value!r}: {', '.join(unknown)} is not an architecture any modelgen spec "
                                f"names (known: {', '.join(sorted(available))})")
    return {n: available[n] for n in names}


def register() -> None:
    """vLLM's entry point: register the selected architectures and guard the model-class resolution."""
    from vllm import ModelRegistry
    from vllm.logger import init_logger

    log = init_logger("vllm.plugins.modelgen")  # under "vllm": vLLM's handlers show it in the server log
    available = generated_models()
    native = {a for a in ModelRegistry.get_supported_archs() if _claimed.get(a) is None}
    chosen = selected(settings.get(ENV), available, native)
    for arch, package in sorted(chosen.items()):
        path = class_path(package)
        if _claimed.get(arch) == path:
            continue  # vLLM loads plugins once per process, but an engine started twice calls this again
        ModelRegistry.register_model(arch, path)
        _claimed[arch] = path
        log.info("modelgen serves %s: %s%s", arch, path, " (overrides vLLM's class)" if arch in native else "")
    _guard_resolution()


def check_built(architectures: list[str], model_cls: type) -> None:
    """RuntimeError when an architecture modelgen claimed resolved to a class that is not modelgen's."""
    claimed = [a for a in architectures if a in _claimed]
    if claimed and not model_cls.__module__.startswith(GENERATED + "."):
        raise RuntimeError(
            f"modelgen registered {claimed[0]} ({_claimed[claimed[0]]}) but vLLM resolved it to "
            f"{model_cls.__module__}.{model_cls.__qualname__}; unset {ENV} (or set it to 'missing') to serve vLLM's "
            "own model, or drop --model-impl")


def _guard_resolution() -> None:
    from vllm.model_executor import model_loader
    from vllm.model_executor.model_loader import utils

    original = utils.get_model_architecture
    if getattr(original, "_modelgen_guard", False):
        return

    def get_model_architecture(model_config):
        model_cls, arch = original(model_config)
        check_built(list(getattr(model_config.hf_config, "architectures", None) or []), model_cls)
        return model_cls, arch

    get_model_architecture._modelgen_guard = True  # type: ignore[attr-defined]
    utils.get_model_architecture = get_model_architecture
    if getattr(model_loader, "get_model_architecture", None) is original:
        model_loader.get_model_architecture = get_model_architecture
