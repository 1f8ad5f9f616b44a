"""Find the generated model package for an HF architecture (``config.json`` ``architectures``) and a target.

Each target package (``generated/<target>/__init__.py``) holds ``MODELS``, a literal index from architecture to model
package written by codegen, so finding a model imports that one package and nothing else: importing a generated
package runs its code, and a model nobody asked for has no business running.
"""
from __future__ import annotations

import importlib
from types import ModuleType

from ..targets import check_target


def model_index(target: str) -> dict[str, str]:
    """Architecture -> model package name, for every spec built for ``target`` (imports no model package)."""
    return dict(importlib.import_module(f"modelgen.generated.{check_target(target)}").MODELS)


def find_model(architectures: list[str] | None, target: str) -> ModuleType:
    index = model_index(target)
    for arch in architectures or []:
        if arch in index:
            name = f"modelgen.generated.{target}.{index[arch]}"
            try:
                module = importlib.import_module(name)
            except ModuleNotFoundError as e:
                if e.name != name:
                    raise
                raise LookupError(
                    f"{arch}: package {name} is indexed but not built; run `modelgen build --all`"
                ) from None
            if arch not in module.ARCHITECTURES:
                raise LookupError(f"{arch}: {name} serves {module.ARCHITECTURES}; rebuild with `modelgen build --all`")
            return module
    raise LookupError(
        f"no generated {target} model for architectures {architectures}; generated: {sorted(index)} "
        f"(add a spec under specs/ and run `modelgen build`)"
    )
