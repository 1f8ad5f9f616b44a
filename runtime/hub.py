"""Hugging Face Hub ids (``org/name``) as checkpoint arguments, resolved to a local snapshot directory.

``modelgen run --checkpoint HuggingFaceTB/SmolLM2-135M-Instruct`` (and ``LLM("org/name")``, ``modelgen serve`` and
``modelgen coverage``, which all open checkpoints through :class:`~modelgen.runtime.checkpoint_dir.CheckpointDir`)
take a hub id wherever they take a directory:

1. an existing local path always wins (a folder named ``org/name`` in the working directory is that folder);
2. otherwise a string shaped like a hub repository id is looked up in ``huggingface_hub``'s local cache first
   (``snapshot_download(repo_id, local_files_only=True)``: no network; ``HF_HOME`` / ``HF_HUB_CACHE`` say where);
3. when it is not cached (or cached without its weights) and the hub is not offline (``HF_HUB_OFFLINE``), the
   files modelgen reads (``*.json``, ``*.safetensors``, ``*.jinja``: no ``*.bin`` / ``*.pth`` / ONNX / GGUF copies)
   are downloaded into that cache;
4. offline with nothing cached, or when the hub cannot be reached, the error is one line naming the command that
   fetches the model where there is a network (``hf download org/name --local-dir DIR``).

The snapshot's files are symlinks into the repository's ``blobs/``; the loader's confinement check allows exactly
that layout (runtime/loader/checkpoint.py). ``huggingface_hub`` is imported only when a hub id is resolved.
"""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from .loader.checkpoint import CheckpointError, read_json_if_exists
from .loader.files import MAX_INDEX_BYTES

# What a checkpoint directory is read for (config.json, generation_config.json, tokenizer*.json,
# model.safetensors.index.json, chat_template.jinja, the safetensors shards).
ALLOW_PATTERNS = ["*.json", "*.safetensors", "*.jinja"]

# huggingface_hub's repo-id rule (utils.validate_repo_id): `org/name` of word characters, '-' and '.', no '--' or
# '..', at most 96 characters. Only the two-part form is taken as a hub id: a bare `name` is a local path.
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]*[A-Za-z0-9_]")

_TRUE = {"1", "on", "yes", "true"}


def looks_like_hub_id(value: object) -> bool:
    """True for a string shaped like ``org/name`` (not ``./x``, ``/abs``, ``~/x``, ``a/b/c`` nor a Path object)."""
    return (isinstance(value, str) and len(value) <= 96 and _HUB_ID.fullmatch(value) is not None
            and "--" not in value and ".." not in value)


def download_command(repo_id: str) -> str:
    """The shell command that downloads ``repo_id`` into a directory (``hf`` since huggingface_hub 1.0; before that
    ``huggingface-cli``)."""
    cli = "hf"
    try:
        import huggingface_hub

        if int(huggingface_hub.__version__.split(".")[0]) < 1:
            cli = "huggingface-cli"
    except (ImportError, ValueError):
        pass
    return f"{cli} download {repo_id} --local-dir DIR"


def hub_cache_dir() -> Path:
    """Where huggingface_hub keeps its cache, read from the environment now (huggingface_hub reads it once, at
    import): ``HF_HUB_CACHE``, else ``HF_HOME``/hub, else ``~/.cache/huggingface/hub``."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "huggingface" / "hub"


def hub_offline() -> bool:
    """``HF_HUB_OFFLINE`` set to 1/on/yes/true (read now, as :func:`hub_cache_dir`)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE


def _has_weights(path: Path) -> bool:
    """config.json plus the safetensors weights: every shard of an index, else at least one ``*.safetensors``."""
    if not (path / "config.json").is_file():
        return False
    index = path / "model.safetensors.index.json"
    if index.is_file():
        # Read as the loader reads it (a regular file, bounded bytes and depth): a cache entry is untrusted too.
        try:
            weight_map = (read_json_if_exists(index, MAX_INDEX_BYTES) or {}).get("weight_map", {})
            shards = set(weight_map.values())
        except (CheckpointError, AttributeError, TypeError):
            return True  # a broken index is the loader's to report, with its file named
        return bool(shards) and all(isinstance(s, str) and (path / s).is_file() for s in shards)
    return any(path.glob("*.safetensors"))


def _hub_errors():
    """huggingface_hub's error classes by name (their module moved between versions; a missing one never matches)."""
    import huggingface_hub

    mods = [getattr(huggingface_hub, "errors", None), getattr(huggingface_hub, "utils", None)]

    def cls(name: str) -> tuple[type[BaseException], ...]:
        for m in mods:
            c = getattr(m, name, None) if m is not None else None
            if isinstance(c, type):
                return (c,)
        return ()

    return cls


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def resolve_hub_id(repo_id: str, *, progress: bool | None = None, notify=None) -> Path:
    """The local snapshot directory of hub model ``repo_id`` (cache first, then a download unless offline).

    ``progress`` as everywhere (runtime/progress.py): None draws the download bars only when stderr is a terminal,
    False never. ``notify(line)`` is told when a download starts (the CLI prints it on stderr). Every failure is a
    one-line :class:`CheckpointError` naming ``repo_id``."""
    try:
        import huggingface_hub
        from huggingface_hub import snapshot_download
    except ImportError:
        raise CheckpointError(f"{repo_id}: no such checkpoint directory; to use it as a Hugging Face Hub id, "
                              f"pip install huggingface_hub") from None
    err = _hub_errors()
    cache = hub_cache_dir()
    how_to = (f"download it where there is a network (`{download_command(repo_id)}`) and pass DIR as the "
              f"checkpoint")

    cached: Path | None = None
    try:
        cached = Path(snapshot_download(repo_id, cache_dir=str(cache), local_files_only=True,
                                        allow_patterns=ALLOW_PATTERNS))
    except Exception as e:  # not cached (LocalEntryNotFoundError), or an incomplete snapshot: download below
        if not isinstance(e, err("LocalEntryNotFoundError") + err("IncompleteSnapshotError") + (OSError,)):
            raise CheckpointError(f"{repo_id}: the Hugging Face cache {cache} could not be read: "
                                  f"{_first_line(e)}") from None
    if cached is not None and _has_weights(cached):
        return cached
    if hub_offline():
        what = (f"cached at {cached} without its config.json / *.safetensors" if cached is not None
                else f"not in the Hugging Face cache {cache}")
        raise CheckpointError(f"{repo_id}: no such checkpoint directory, and {what} with HF_HUB_OFFLINE set; {how_to}")

    if notify is not None:
        notify(f"downloading {repo_id} from the Hugging Face Hub into {cache} ({', '.join(ALLOW_PATTERNS)})")
    utils = huggingface_hub.utils
    quiet = progress is False or (progress is None and not sys.stderr.isatty())
    was_disabled = utils.are_progress_bars_disabled()
    if quiet:
        utils.disable_progress_bars()
    try:
        path = Path(snapshot_download(repo_id, cache_dir=str(cache), allow_patterns=ALLOW_PATTERNS))
    except err("GatedRepoError") as e:  # before RepositoryNotFoundError: a subclass of it
        raise CheckpointError(f"{repo_id}: a gated model on the Hugging Face Hub: accept its terms at "
                              f"https://huggingface.co/{repo_id} and log in (`hf auth login` or HF_TOKEN) "
                              f"({_first_line(e)})") from None
    except err("RepositoryNotFoundError"):
        raise CheckpointError(f"{repo_id}: no such checkpoint directory, nor a model repository on the Hugging Face "
                              f"Hub (private ones need `hf auth login` or HF_TOKEN)") from None
    except err("RevisionNotFoundError") as e:
        raise CheckpointError(f"{repo_id}: {_first_line(e)}") from None
    except err("LocalEntryNotFoundError") as e:  # the hub could not be reached and nothing is cached
        raise CheckpointError(f"{repo_id}: not in the Hugging Face cache {cache} and the Hub cannot be reached "
                              f"({_first_line(e)}); {how_to}") from None
    except (OSError, ValueError) + err("HfHubHTTPError") as e:
        raise CheckpointError(f"{repo_id}: download from the Hugging Face Hub failed ({type(e).__name__}: "
                              f"{_first_line(e)}); {how_to}") from None
    finally:
        if quiet and not was_disabled:
            utils.enable_progress_bars()
    if not (path / "config.json").is_file():
        raise CheckpointError(f"{repo_id}: the Hugging Face Hub repository has no config.json at its top level "
                              f"(downloaded to {path}); modelgen reads HF-layout checkpoints")
    if not _has_weights(path):
        raise CheckpointError(f"{repo_id}: the Hugging Face Hub repository has no *.safetensors weights (downloaded "
                              f"to {path}); modelgen loads safetensors only (a *.bin checkpoint can be converted with "
                              f"transformers' save_pretrained(safe_serialization=True))")
    return path


def resolve_checkpoint(path: str | os.PathLike, *, progress: bool | None = None, notify=None) -> Path:
    """``path`` as a local Path: itself when it exists or is not shaped like a hub id, else :func:`resolve_hub_id`.
    (Existence and kind are checked by :func:`~modelgen.runtime.checkpoint_dir.check_checkpoint_dir`.)"""
    if looks_like_hub_id(path) and not Path(path).exists():
        return resolve_hub_id(path, progress=progress, notify=notify)
    return Path(path)
