"""Checkpoint reader for safetensors weights (single file, directory, or sharded with an index).

The reader validates the whole checkpoint up front, cheaply: it parses every file's
safetensors header itself (8-byte little-endian length + JSON) so that names, shapes,
dtypes and byte offsets are known without touching tensor data, and it checks that
the file is long enough to hold every tensor the header promises.  Tensor data is then
read lazily through ``safetensors.safe_open`` (memory-mapped).

Every problem is reported as a :class:`CheckpointError` whose message names the file
and/or tensor concerned, so a user can tell at once which download is broken.

Pickle checkpoints (``*.bin``, ``*.pt``, ...) are deliberately never loaded: unpickling
can run arbitrary code.

Layouts accepted by :class:`Checkpoint`:

* a directory holding ``model.safetensors.index.json`` and the shards its
  ``weight_map`` names (other ``*.safetensors`` files in the directory are ignored, e.g.
  Mistral's ``consolidated.safetensors`` next to HF shards);
* a directory without an index: every ``*.safetensors`` file in it (sorted by name);
* a single ``.safetensors`` file, or an ``*.safetensors.index.json`` file.

Checkpoints are untrusted input (see SECURITY.md). Every file is checked to be a regular file before it is opened (a
FIFO would block ``open``, ``/dev/zero`` would never end a read; ``runtime/loader/files.py``), and JSON is read
with byte and depth bounds. Every shard a directory or an index names must resolve, after
following symlinks, inside the checkpoint directory: an index entry ``../x.safetensors`` or ``/etc/passwd``, or a
symlink pointing elsewhere, is refused unless ``allow_external_shards=True``. The one layout allowed to point
outside is the Hugging Face hub cache (``models--org--name/snapshots/<rev>/`` symlinks into the same repository's
``blobs/``). With ``check_finite`` every floating tensor read is checked for NaN/Inf, and an error names the tensor
and its file: ``"full"`` (or True) checks every element, ``"sampled"`` every element of tensors up to 64 KiB and 1/64
of the 64 KiB blocks of larger ones (evenly spread, the last included), ``"off"`` (or False) nothing. Measured on
this 2-core CPU, page cache warm, one thread, ``load_weights`` medians of 21-31 interleaved runs: SmolLM2-135M fp32
(538 MB, 272 tensors) full +25%, sampled -0.6% (within noise); synthetic 141 MB fp32 / 71 MB bf16 Llamas (57
tensors, 33-65 ms loads) full +33-38%, sampled +4-9% (2.8 ms of checks per 272 resident tensors). A full check is
one extra read of every weight, which a memcpy-speed load cannot hide; see ``LLM``'s ``check_finite="auto"``.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import pathlib
from dataclasses import dataclass
from typing import Any, Iterator

import torch

from ..checkpoint_error import CheckpointError
from .files import MAX_CONFIG_BYTES, MAX_INDEX_BYTES, open_regular, read_json_object, regular_file

__all__ = ["CheckpointError", "Checkpoint", "read_json_if_exists", "SAFETENSORS_DTYPES"]

INDEX_NAME = "model.safetensors.index.json"
_INDEX_SUFFIX = ".safetensors.index.json"
# safetensors itself refuses headers above 100 MB; anything bigger is corruption.
_MAX_HEADER_BYTES = 100 * 1024 * 1024
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
_MAX_LISTED = 5


def _confinement_roots(root: pathlib.Path) -> list[pathlib.Path]:
    """Real directories a checkpoint rooted at ``root`` may read shards from.

    The hub cache keeps ``snapshots/<rev>/*.safetensors`` as symlinks to ``../../blobs/<sha>``; those stay inside
    the repository's own cache folder, so its ``blobs/`` is allowed too.
    """
    real = pathlib.Path(os.path.realpath(root))
    roots = [real]
    if real.parent.name == "snapshots" and real.parent.parent.name.startswith("models--"):
        roots.append(real.parent.parent / "blobs")
    return roots


def _check_confined(path: pathlib.Path, roots: list[pathlib.Path], what: str, allow_external: bool) -> None:
    """CheckpointError unless ``path`` (symlinks followed) lies inside one of ``roots``."""
    if allow_external:
        return
    real = pathlib.Path(os.path.realpath(path))
    if any(real == r or real.is_relative_to(r) for r in roots):
        return
    raise CheckpointError(
        f"{what} resolves to {real}, outside the checkpoint directory {roots[0]}; refused (shards must live inside "
        f"the checkpoint directory; pass allow_external_shards=True / --allow-external-shards to trust it)"
    )


def _nonfinite_error(tensor: torch.Tensor, name: str, file, what: str = "tensor") -> CheckpointError:
    bad = ~torch.isfinite(tensor)
    count = int(bad.sum())
    first = tuple(int(i) for i in bad.nonzero()[0]) if count else ()
    return CheckpointError(
        f"{file}: {what} {name!r} holds {count} NaN/Inf value(s) of {tensor.numel()} (first at index {first}); the "
        f"checkpoint is corrupt (check_finite=False / --check-finite off loads it anyway)"
    )


FINITE_MODES = ("full", "sampled", "off")
_SAMPLE_FULL_BYTES = 64 << 10  # tensors up to one block are always checked whole
_SAMPLE_BLOCK_BYTES = 64 << 10
_SAMPLE_STRIDE = 64  # one block in 64 (~1.6% of the bytes)


def finite_mode(check_finite: bool | str) -> str:
    """True -> "full", False -> "off"; a string must be one of FINITE_MODES."""
    if check_finite is True:
        return "full"
    if check_finite is False or check_finite is None:
        return "off"
    if check_finite not in FINITE_MODES:
        raise ValueError(f"check_finite = {check_finite!r}: expected True, False or one of {', '.join(FINITE_MODES)}")
    return check_finite


def check_finite_tensor(tensor: torch.Tensor, name: str, file: pathlib.Path | str, mode: str = "full",
                        what: str = "tensor") -> None:
    """CheckpointError naming the tensor and file if a floating tensor holds NaN or Inf (``mode``: see the module
    docstring; "sampled" reads 1/64 of a large tensor and finds regions of NaN/Inf, not every isolated value)."""
    if mode == "off" or not tensor.is_floating_point() or tensor.numel() == 0:
        return
    probe = tensor
    if mode == "sampled" and tensor.is_contiguous() and tensor.numel() * tensor.element_size() > _SAMPLE_FULL_BYTES:
        # Blocks aligned to the tensor's end, every 64th counted back from the last: one strided view (only those
        # bytes are read) and one reduction. On small models the per-tensor cost matters as much as the bytes.
        block = _SAMPLE_BLOCK_BYTES // tensor.element_size()
        nrows = tensor.numel() // block
        first = (nrows - 1) % _SAMPLE_STRIDE
        count = (nrows - 1 - first) // _SAMPLE_STRIDE + 1
        offset = tensor.storage_offset() + tensor.numel() - (nrows - first) * block
        probe = tensor.as_strided((count, block), (_SAMPLE_STRIDE * block, 1), offset)
    if not _all_finite(probe):
        raise _nonfinite_error(tensor.float() if tensor.dtype.itemsize == 1 else tensor, name, file, what)


def _all_finite(probe: torch.Tensor) -> bool:
    """A sum is non-finite whenever an element is (NaN propagates, inf + finite = inf, inf - inf = NaN), and it is
    the cheapest pass torch has (~25x faster than ``isfinite().all()``, which materialises a bool tensor); a
    non-finite sum may also be an overflow of large finite values, so min/max (exact) decide then."""
    if probe.dtype.itemsize == 1:  # float8: no CPU reductions; upcast (these checkpoints are rare and small)
        probe = probe.float()
    if math.isfinite(probe.sum().item()):
        return True
    lo, hi = torch.aminmax(probe)
    return math.isfinite(lo.item()) and math.isfinite(hi.item())


class _FiniteSlice:
    """A safetensors slice whose reads are checked for NaN/Inf (the neuron loaders read through slices)."""

    def __init__(self, inner, name: str, file: pathlib.Path, mode: str):
        self._inner, self._name, self._file, self._mode = inner, name, file, mode

    def __getitem__(self, index):
        tensor = self._inner[index]
        check_finite_tensor(tensor, self._name, self._file, self._mode)
        return tensor

    def __getattr__(self, attr):
        return getattr(self._inner, attr)


def _build_dtype_table() -> dict[str, tuple[torch.dtype | None, int | None]]:
    """safetensors dtype string -> (torch dtype or None if torch lacks it, bytes per element).

    Bytes per element is None for sub-byte formats, whose size is not checked.
    """
    table: dict[str, tuple[torch.dtype | None, int | None]] = {
        "F64": (torch.float64, 8),
        "F32": (torch.float32, 4),
        "F16": (torch.float16, 2),
        "BF16": (torch.bfloat16, 2),
        "I64": (torch.int64, 8),
        "I32": (torch.int32, 4),
        "I16": (torch.int16, 2),
        "I8": (torch.int8, 1),
        "U8": (torch.uint8, 1),
        "BOOL": (torch.bool, 1),
        "C64": (torch.complex64, 8),
    }
    optional = {
        "F8_E4M3": ("float8_e4m3fn", 1),
        "F8_E5M2": ("float8_e5m2", 1),
        "F8_E4M3FNUZ": ("float8_e4m3fnuz", 1),
        "F8_E5M2FNUZ": ("float8_e5m2fnuz", 1),
        "F8_E8M0": ("float8_e8m0fnu", 1),
        "U16": ("uint16", 2),
        "U32": ("uint32", 4),
        "U64": ("uint64", 8),
    }
    for code, (attr, size) in optional.items():
        table[code] = (getattr(torch, attr, None), size)
    # Sub-byte formats: known to safetensors, no torch dtype, size not checkable per element.
    for code in ("F4", "F6_E2M3", "F6_E3M2"):
        table[code] = (None, None)
    return table


#: safetensors dtype string -> (torch.dtype or None, itemsize in bytes or None)
SAFETENSORS_DTYPES = _build_dtype_table()


@dataclass(frozen=True)
class _TensorInfo:
    file: pathlib.Path
    dtype: str  # safetensors dtype string, e.g. "BF16"
    shape: tuple[int, ...]
    begin: int  # byte offsets relative to the start of the data section
    end: int


def read_json_if_exists(path: str | os.PathLike, limit: int = MAX_CONFIG_BYTES) -> dict | None:
    """Return the JSON object stored at ``path``, or None if there is no such file.

    Raises CheckpointError (naming the file) if it exists but is not a regular file (a FIFO, a device, a
    directory), is over ``limit`` bytes, or is not a JSON object (runtime/loader/files.py).
    """
    return read_json_object(path, CheckpointError, limit, what=pathlib.Path(path).name)


def is_checkpoint_file(path: pathlib.Path) -> bool:
    """Whether ``path`` is a regular file; False if absent, CheckpointError naming it for a FIFO, device,
    directory or socket (a shard or index that is one of those is an attack or an accident, never skipped)."""
    return regular_file(path, CheckpointError, "checkpoint file") is not None


def _read_header(path: pathlib.Path) -> tuple[dict[str, _TensorInfo], dict[str, str]]:
    """Parse and validate a safetensors header without reading tensor data.

    Returns (tensor name -> info, __metadata__).  Raises CheckpointError naming the file.
    """
    try:
        f = open_regular(path, CheckpointError, "safetensors file")
        if f is None:
            raise CheckpointError(f"{path}: no such safetensors file")
        with f:
            file_size = os.fstat(f.fileno()).st_size
            prefix = f.read(8)
            if len(prefix) < 8:
                raise CheckpointError(
                    f"{path}: not a safetensors file: only {file_size} bytes, "
                    f"too short for the 8-byte header length (truncated or empty file?)"
                )
            header_len = int.from_bytes(prefix, "little")
            if header_len > _MAX_HEADER_BYTES:
                raise CheckpointError(
                    f"{path}: corrupt safetensors file: header length field says {header_len} bytes, "
                    f"which is implausible (limit {_MAX_HEADER_BYTES}); the file is not safetensors "
                    f"or its first 8 bytes are damaged"
                )
            if 8 + header_len > file_size:
                raise CheckpointError(
                    f"{path}: corrupt or truncated safetensors file: header length field says "
                    f"{header_len} bytes but the file has only {file_size} bytes"
                )
            raw = f.read(header_len)
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read file: {e}") from e

    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: corrupt safetensors file: header is not valid JSON ({e})") from e
    if not isinstance(header, dict):
        raise CheckpointError(
            f"{path}: corrupt safetensors file: header is a JSON {type(header).__name__}, expected an object"
        )

    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict):
        raise CheckpointError(f"{path}: corrupt safetensors file: __metadata__ is not a JSON object")

    data_size = file_size - 8 - header_len
    infos: dict[str, _TensorInfo] = {}
    max_end = 0
    max_end_name = None
    for name, entry in header.items():
        where = f"{path}: corrupt safetensors header for tensor {name!r}"
        if not isinstance(entry, dict):
            raise CheckpointError(f"{where}: entry is not a JSON object")
        dtype = entry.get("dtype")
        shape = entry.get("shape")
        offsets = entry.get("data_offsets")
        if not isinstance(dtype, str):
            raise CheckpointError(f"{where}: missing or non-string 'dtype'")
        if not (isinstance(shape, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)):
            raise CheckpointError(f"{where}: 'shape' must be a list of non-negative integers, got {shape!r}")
        if not (
            isinstance(offsets, list)
            and len(offsets) == 2
            and all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offsets)
            and offsets[0] <= offsets[1]
        ):
            raise CheckpointError(f"{where}: 'data_offsets' must be [begin, end] with 0 <= begin <= end, got {offsets!r}")
        begin, end = offsets
        itemsize = SAFETENSORS_DTYPES.get(dtype, (None, None))[1]
        if itemsize is not None:
            expected = math.prod(shape) * itemsize
            if end - begin != expected:
                raise CheckpointError(
                    f"{where}: data_offsets span {end - begin} bytes but dtype {dtype} with shape "
                    f"{tuple(shape)} needs {expected} bytes"
                )
        if end > max_end:
            max_end, max_end_name = end, name
        infos[name] = _TensorInfo(path, dtype, tuple(shape), begin, end)

    if max_end > data_size:
        raise CheckpointError(
            f"{path}: truncated or corrupt safetensors file: tensor {max_end_name!r} ends at data byte "
            f"{max_end} (file byte {8 + header_len + max_end}) but the file has only {file_size} bytes "
            f"({max_end - data_size} bytes missing; re-download it?)"
        )
    return infos, {str(k): str(v) for k, v in metadata.items()}


def _pickle_note(files: list[pathlib.Path]) -> str:
    if not files:
        return ""
    names = ", ".join(p.name for p in files[:_MAX_LISTED]) + (", ..." if len(files) > _MAX_LISTED else "")
    return (
        f"; found pickle checkpoint file(s) ({names}) which are not loaded, on purpose "
        f"(unpickling can execute arbitrary code) - convert them to safetensors first"
    )


def _list(items: list[str], limit: int = _MAX_LISTED) -> str:
    shown = ", ".join(repr(x) for x in items[:limit])
    if len(items) > limit:
        shown += f", ... ({len(items) - limit} more)"
    return shown


class Checkpoint:
    """Read-only view of a safetensors checkpoint; see the module docstring for layouts."""

    def __init__(self, path: str | os.PathLike, *, allow_external_shards: bool = False,
                 check_finite: bool | str = True, headers_only: bool = False):
        """``headers_only``: names, shapes and dtypes (every check above), no file kept open; reading a tensor
        then fails as on a closed checkpoint."""
        self.path = pathlib.Path(path)
        self.allow_external_shards = allow_external_shards
        self.check_finite = finite_mode(check_finite)
        self.index_path: pathlib.Path | None = None
        self._tensors: dict[str, _TensorInfo] = {}
        self._metadata: dict[pathlib.Path, dict[str, str]] = {}
        self._handles: dict[pathlib.Path, Any] = {}
        self._closed = False

        files, index_map = self._discover()
        self._files = files

        # Parse every header ourselves (cheap, no data read) and find duplicates.
        for f in files:
            infos, meta = _read_header(f)
            self._metadata[f] = meta
            for name, info in infos.items():
                prev = self._tensors.get(name)
                if prev is not None:
                    raise CheckpointError(
                        f"tensor {name!r} is present in two files: {prev.file} and {f}"
                    )
                self._tensors[name] = info

        if index_map is not None:
            self._check_index(index_map)

        if headers_only:
            self._closed = True
            return
        # Open every file with safetensors (memory-mapped; data is read lazily).
        from safetensors import safe_open

        try:
            for f in files:
                try:
                    self._handles[f] = safe_open(str(f), framework="pt")
                except Exception as e:  # safetensors raises SafetensorError / OSError
                    raise CheckpointError(f"{f}: safetensors cannot open this file: {e}") from e
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ discovery
    def _discover(self) -> tuple[list[pathlib.Path], dict[str, pathlib.Path] | None]:
        """Return (files to open, index weight_map resolved to paths or None)."""
        p = self.path
        if not p.is_dir() and is_checkpoint_file(p):  # a FIFO or a device given as the checkpoint is refused here
            if p.name.endswith(_INDEX_SUFFIX) or p.name.endswith(".index.json"):
                return self._from_index(p)
            if p.suffix in _PICKLE_SUFFIXES:
                raise CheckpointError(f"{p}: not a safetensors file" + _pickle_note([p]))
            return [p], None
        if not p.exists():
            raise CheckpointError(f"{p}: checkpoint path does not exist")
        if not p.is_dir():
            raise CheckpointError(f"{p}: checkpoint path is neither a file nor a directory")

        roots = _confinement_roots(p)
        index = p / INDEX_NAME
        if not is_checkpoint_file(index):
            candidates = sorted(x for x in p.glob("*" + _INDEX_SUFFIX) if is_checkpoint_file(x))
            if len(candidates) == 1:
                index = candidates[0]
            elif len(candidates) > 1:
                raise CheckpointError(
                    f"{p}: no {INDEX_NAME} but several index files ({_list([c.name for c in candidates])}); "
                    f"pass the index file to use"
                )
        if is_checkpoint_file(index):
            _check_confined(index, roots, f"{index}: index file", self.allow_external_shards)
            return self._from_index(index)

        files = sorted(x for x in p.glob("*.safetensors") if is_checkpoint_file(x))
        for f in files:  # a symlinked shard may point anywhere: only inside the checkpoint directory
            _check_confined(f, roots, f"{f}: shard file", self.allow_external_shards)
        if not files:
            pickles = sorted(x for x in p.iterdir() if x.suffix in _PICKLE_SUFFIXES and x.is_file())
            raise CheckpointError(
                f"{p}: no safetensors checkpoint found (no {INDEX_NAME} and no *.safetensors files)"
                + _pickle_note(pickles)
            )
        return files, None

    def _from_index(self, index: pathlib.Path) -> tuple[list[pathlib.Path], dict[str, pathlib.Path]]:
        self.index_path = index
        data = read_json_if_exists(index, MAX_INDEX_BYTES)
        if data is None:
            raise CheckpointError(f"{index}: index file does not exist")
        weight_map = data.get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise CheckpointError(f"{index}: index has no 'weight_map' object (or it is empty)")
        root = index.parent
        roots = _confinement_roots(root)
        by_shard: dict[str, list[str]] = {}
        for tensor, shard in weight_map.items():
            if not isinstance(shard, str) or not shard:
                raise CheckpointError(f"{index}: weight_map entry for tensor {tensor!r} is not a file name: {shard!r}")
            by_shard.setdefault(shard, []).append(tensor)

        # Resolve shard names; different spellings of one file ("a" vs "./a") are one shard.
        files: list[pathlib.Path] = []
        canonical: dict[str, pathlib.Path] = {}  # resolved -> first path spelling
        shard_path: dict[str, pathlib.Path] = {}
        missing: list[str] = []
        for shard in sorted(by_shard):
            # Confinement before any existence test: "/etc/passwd" or "../x" is refused whether or not it exists.
            where = f"{index}: weight_map shard {shard!r} (tensor {sorted(by_shard[shard])[0]!r})"
            if "\x00" in shard:
                raise CheckpointError(f"{where}: not a file name")
            if os.path.isabs(shard) and not self.allow_external_shards:
                raise CheckpointError(f"{where} is an absolute path; refused (shards are named relative to the "
                                      f"checkpoint directory; pass allow_external_shards=True / "
                                      f"--allow-external-shards to trust it)")
            sp = root / shard
            _check_confined(sp, roots, where, self.allow_external_shards)
            if not is_checkpoint_file(sp):
                missing.append(
                    f"{sp} (should hold {len(by_shard[shard])} tensor(s): {_list(sorted(by_shard[shard]))})"
                )
                continue
            key = os.path.realpath(sp)
            if key not in canonical:
                canonical[key] = sp
                files.append(sp)
            shard_path[shard] = canonical[key]
        if missing:
            raise CheckpointError(
                f"{index}: index names shard file(s) that do not exist: " + "; ".join(missing)
            )
        return files, {t: shard_path[s] for t, s in weight_map.items()}

    def _check_index(self, index_map: dict[str, pathlib.Path]) -> None:
        wrong = []
        for tensor in sorted(index_map):
            shard = index_map[tensor]
            info = self._tensors.get(tensor)
            if info is None or info.file != shard:
                actual = f" (it is in {info.file})" if info is not None else ""
                wrong.append(f"tensor {tensor!r} is not in shard {shard}{actual}")
        if wrong:
            more = f"; ... ({len(wrong) - _MAX_LISTED} more)" if len(wrong) > _MAX_LISTED else ""
            raise CheckpointError(
                f"{self.index_path}: index does not match the shard contents: "
                + "; ".join(wrong[:_MAX_LISTED])
                + more
            )

    # ------------------------------------------------------------------ lookup
    def _info(self, name: str) -> _TensorInfo:
        info = self._tensors.get(name)
        if info is not None:
            return info
        keys = list(self._tensors)
        close = difflib.get_close_matches(str(name), keys, n=_MAX_LISTED, cutoff=0.6)
        if close:
            hint = f"; did you mean: {_list(close)}?"
        else:
            hint = f"; checkpoint has {len(keys)} tensors, e.g. {_list(sorted(keys))}"
        raise CheckpointError(f"tensor {name!r} not found in checkpoint {self.path}{hint}")

    def _handle(self, info: _TensorInfo, name: str):
        if self._closed:
            raise CheckpointError(f"{info.file}: checkpoint is closed (reading tensor {name!r})")
        return self._handles[info.file]

    @property
    def files(self) -> list[pathlib.Path]:
        return list(self._files)

    def keys(self) -> list[str]:
        return sorted(self._tensors)

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self._tensors)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._tensors

    def file_of(self, name: str) -> pathlib.Path:
        return self._info(name).file

    def shape(self, name: str) -> tuple[int, ...]:
        return self._info(name).shape

    def dtype(self, name: str) -> torch.dtype:
        info = self._info(name)
        dt = SAFETENSORS_DTYPES.get(info.dtype, (None, None))[0]
        if dt is None:
            raise CheckpointError(
                f"{info.file}: tensor {name!r} has dtype {info.dtype!r}, which has no torch equivalent here"
            )
        return dt

    def header_dtype(self, name: str) -> str:
        """The dtype string of ``name``'s safetensors header (``BF16``, ``F8_E4M3``, ...): what a lazy slice's
        ``get_dtype()`` returns, known without reading the tensor (``modelgen coverage``'s meta slices)."""
        return self._info(name).dtype

    def metadata(self, file: str | os.PathLike | None = None) -> dict[str, str]:
        """The ``__metadata__`` of one file (default: the first file)."""
        f = self._files[0] if file is None else pathlib.Path(file)
        if f not in self._metadata:
            raise CheckpointError(f"{f}: not a file of checkpoint {self.path}")
        return dict(self._metadata[f])

    def get_slice(self, name: str):
        info = self._info(name)
        try:
            inner = self._handle(info, name).get_slice(name)
            return _FiniteSlice(inner, name, info.file, self.check_finite) if self.check_finite != "off" else inner
        except CheckpointError:
            raise
        except Exception as e:
            raise CheckpointError(f"{info.file}: cannot read tensor {name!r}: {e}") from e

    def get_tensor(self, name: str) -> torch.Tensor:
        info = self._info(name)
        try:
            tensor = self._handle(info, name).get_tensor(name)
        except CheckpointError:
            raise
        except Exception as e:
            raise CheckpointError(f"{info.file}: cannot read tensor {name!r}: {e}") from e
        check_finite_tensor(tensor, name, info.file, self.check_finite)
        return tensor

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        handles, self._handles = self._handles, {}
        self._closed = True
        for h in handles.values():
            exit_ = getattr(h, "__exit__", None)
            if exit_ is not None:
                try:
                    exit_(None, None, None)
                except Exception:
                    pass

    def __enter__(self) -> "Checkpoint":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return f"Checkpoint({str(self.path)!r}, files={len(self._files)}, tensors={len(self._tensors)})"
