"""The targets modelgen generates code for, and which of them its own engine runs: the single definition the compiler
(``modelgen build --target``, the templates it renders) and the runtime (``runtime/targets/``, the model registry,
``LLM(target=...)``) both import. It sits in the top package, below both, so the compiler never imports the runtime;
standard library only (``modelgen build`` stays torch-free)."""
from __future__ import annotations

# Every target modelgen generates code for; generated/<target>/ and templates/<target>/ follow this list.
TARGETS: tuple[str, ...] = ("rocm", "neuron", "vllm")

# The targets modelgen's own engine runs (LLM(target=...), `modelgen run` / `serve` / `coverage`). The vllm target's
# output is run by vLLM itself, through modelgen's vLLM plugin (runtime/vllm/plugin.py), never by this engine.
ENGINE_TARGETS: tuple[str, ...] = tuple(t for t in TARGETS if t != "vllm")


def check_target(name: object) -> str:
    """``name`` if it is a known target, else a ValueError naming the choices."""
    if name not in TARGETS:
        raise ValueError(f"unknown target {name!r}; expected one of {', '.join(TARGETS)}")
    return name  # type: ignore[return-value]


def check_engine_target(name: object) -> str:
    """``name`` if modelgen's engine runs it, else a ValueError (the vllm target names how it is served)."""
    if check_target(name) not in ENGINE_TARGETS:
        raise ValueError(f"the {name} target is served by vLLM (`vllm serve CHECKPOINT` with modelgen installed), not "
                         f"by modelgen's engine; expected one of {', '.join(ENGINE_TARGETS)}")
    return name  # type: ignore[return-value]
