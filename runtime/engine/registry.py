"""Find the generated model package for an HF architecture (``config.json`` ``architectures``) and a target."""
from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

TARGETS = ("rocm", "neuron")


def generated_models(target: str) -> dict[str, ModuleType]:
    """Architecture -> generated package, for every model built for ``target``."""
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; expected one of {', '.join(TARGETS)}")
    root = importlib.import_module(f"modelgen.generated.{target}")
    found: dict[str, ModuleType] = {}
    for info in sorted(pkgutil.iter_modules(root.__path__), key=lambda i: i.name):
        if info.ispkg:
            module = importlib.import_module(f"modelgen.generated.{target}.{info.name}")
            for arch in module.ARCHITECTURES:
                found[arch] = module
    return found


def find_model(architectures: list[str] | None, target: str) -> ModuleType:
    models = generated_models(target)
    for arch in architectures or []:
        if arch in models:
            return models[arch]
    raise LookupError(
        f"no generated {target} model for architectures {architectures}; generated: {sorted(models)} "
        f"(add a spec under specs/ and run `modelgen build`)"
    )
