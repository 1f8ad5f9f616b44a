"""neuron-target loading (vLLM Neuron style): ``parameter -> [checkpoint keys]`` mappings + transform closures.

The model exposes the mappings through the loader protocol (``runtime/loader/protocol.py``):
``checkpoint_mappings(available)``, ``ignored_keys`` and ``renames``. Each parameter may carry a loader whose
``transform(slices, rank)`` receives lazy safetensors slices (one per mapped key) and returns this rank's tensor;
parameters without one are loaded as-is. Renames are applied to checkpoint keys before the mappings are looked up.
Each loaded tensor replaces its parameter's data on the device the parameter was built on (the engine builds the
model under its device), so the caller passes no device.
"""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

import torch
from torch import nn

from .. import distributed as dist
from .checkpoint import Checkpoint, CheckpointError
from .names import ExtraLayers, IgnoreRules, apply_renames
from .quantization import process_weights_after_loading
from .report import Coverage
from .split import SplitPart, SplitReader, stored_key

Mappings = Mapping[str, Sequence[str]]


def load_mapped_weights(
    model: nn.Module,
    checkpoint: Checkpoint,
    mappings: Mappings | Callable[[set[str]], Mappings] | None = None,
    *,
    rank: int | None = None,
    ignored: tuple[str, ...] | None = None,
    renames: tuple[tuple[str, str], ...] | None = None,
) -> None:
    """Fill every parameter of ``model`` (strict: every parameter mapped, every checkpoint tensor used or ignored).

    ``mappings``/``ignored``/``renames`` default to the model's ``checkpoint_mappings``/``ignored_keys``/``renames``;
    ``rank`` to this process's tensor-parallel rank.
    """
    mappings = model.checkpoint_mappings if mappings is None else mappings
    ignored = tuple(getattr(model, "ignored_keys", ())) if ignored is None else ignored
    renames = tuple(getattr(model, "renames", ())) if renames is None else renames
    rank = dist.tp_rank() if rank is None else rank
    canonical = {apply_renames(k, renames): k for k in checkpoint.keys()}
    if callable(mappings):  # built from the (renamed) keys present, e.g. fused vs per-expert expert tensors
        mappings = mappings(set(canonical))
    rules = IgnoreRules(ignored)
    params = dict(model.named_parameters())
    coverage = Coverage(checkpoint.keys(), [(name, None) for name in params])
    extra_layers = ExtraLayers.of(model)
    for key in checkpoint.keys():
        name = apply_renames(key, renames)
        pattern = rules.match(name)
        if pattern is not None:
            coverage.ignore(key, f"checkpoint.ignore '{pattern}'")
        elif (skipped := extra_layers.match(name)) is not None:
            coverage.ignore(key, skipped)
    used: set[str] = set()
    # Keys that are parts of a tensor stored fused (checkpoint.split) are read as slices of it.
    splits = SplitReader(checkpoint, getattr(model, "config", None))
    for name, param in params.items():
        keys = mappings.get(name)
        if keys is None:
            continue  # reported as missing
        if any(stored_key(k) not in canonical for k in keys):
            continue  # reported as missing, and the present keys as unexpected
        originals = [canonical[stored_key(k)] for k in keys]
        slices = [splits.slice(k, o) if isinstance(k, SplitPart) else checkpoint.get_slice(o)
                  for k, o in zip(keys, originals)]
        loader = getattr(param, "weight_loader", None)
        try:
            tensor = loader.transform(slices, rank) if loader is not None else slices[0][:]
        except ValueError as e:
            got = ", ".join(
                f"'{o}'" + (f" part '{k.part}' shape {tuple(sl.get_shape())}" if isinstance(k, SplitPart)
                            else f" shape {tuple(checkpoint.shape(o))}") + f" dtype {checkpoint.dtype(o)}"
                for k, o, sl in zip(keys, originals, slices)
            )
            raise CheckpointError(
                f"{checkpoint.file_of(originals[0])}: {got} -> parameter '{name}' (shape {tuple(param.shape)} on "
                f"rank {rank}): {e}"
            ) from None
        if tuple(tensor.shape) != tuple(param.shape):
            raise CheckpointError(
                f"{checkpoint.file_of(originals[0])}: tensor '{originals[0]}' (shape "
                f"{tuple(checkpoint.shape(originals[0]))}, dtype {checkpoint.dtype(originals[0])}) -> parameter "
                f"'{name}': expected shape {tuple(param.shape)}, got {tuple(tensor.shape)} after the transform"
            )
        if tensor.is_floating_point() != param.is_floating_point():
            raise CheckpointError(
                f"{checkpoint.file_of(originals[0])}: tensor '{originals[0]}' has dtype {tensor.dtype}, "
                f"parameter '{name}' expects {param.dtype}"
            )
        with torch.no_grad():
            param.data = tensor.to(device=param.device, dtype=param.dtype).contiguous()
        # A key may feed several parameters (tied embeddings are mapped twice, never aliased).
        coverage.expected.discard((name, None))
        used.update(o for k, o in zip(keys, originals) if not isinstance(k, SplitPart))
    coverage.unused -= used | set(splits.fully_used())  # a stored-fused tensor is used once all its parts are
    coverage.check(str(checkpoint.files[0].parent))
    process_weights_after_loading(model)
