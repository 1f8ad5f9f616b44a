"""Opening a checkpoint's files: regular files only, JSON read with a byte and a nesting bound.

A checkpoint directory is untrusted (SECURITY.md): ``config.json`` may be a FIFO (``open`` blocks until a writer
appears, forever), a symlink to ``/dev/zero`` (``read()`` never ends and fills memory), a directory or a socket.
Every file modelgen reads from a checkpoint goes through :func:`regular_file` first, which decides from ``os.stat``
(never blocks: it does not open the file) and refuses anything that is not a regular file with one line naming it;
the file is then opened non-blocking and checked again on the open descriptor, so a file swapped for a FIFO between
the two steps is refused too, not waited on.

JSON is read at most ``limit`` bytes (a config is kilobytes; a multi-megabyte one is not a config) and its nesting
depth is bounded: Python's parser recurses per level and raises ``RecursionError`` on deep input, and a moderately
deep one would still make every later walker of the dict (copies, reprs) recurse.
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

# Bounds on what one JSON file may be. A config.json / generation_config.json / tokenizer_config.json is a few
# kilobytes (a chat template inside tokenizer_config.json can be tens of kilobytes); an index is one line per tensor
# (DeepSeek-V3's 91k tensors: ~8 MB). tokenizer.json holds the vocabulary and merges: ~11 MB for a 256k vocabulary.
MAX_CONFIG_BYTES = 16 << 20
MAX_INDEX_BYTES = 256 << 20
MAX_TOKENIZER_BYTES = 512 << 20
MAX_JSON_DEPTH = 64  # HF configs nest 3-5 levels (quantization_config.config_groups.group_0.weights)

_KINDS = (
    (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def regular_file(path: str | os.PathLike, error: type[Exception], what: str = "file") -> Path | None:
    """``path`` if it is a regular file (symlinks followed), None if nothing is there; ``error`` (one line naming
    the file and what it is) for a FIFO, device, directory or socket -- decided without opening it."""
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        return None
    except OSError as e:  # a symlink loop, a permission denied on the directory, a name too long
        raise error(f"{p}: cannot read {what}: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{p}: {what} is {_kind(st.st_mode)}, not a regular file; refused")
    return p


def open_regular_fd(path: str | os.PathLike, error: type[Exception], what: str = "file") -> int | None:
    """A read-only descriptor of regular file ``path`` (None if absent); ``error`` for anything else."""
    p = regular_file(path, error, what)
    if p is None:
        return None
    try:
        # O_NONBLOCK: should the name have become a FIFO since the stat, open returns at once instead of waiting
        # for a writer; the fstat below then refuses it. On a regular file the flag changes nothing.
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise error(f"{p}: cannot read {what}: {e.strerror or e}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise error(f"{p}: {what} is {_kind(mode)}, not a regular file; refused")
    return fd


def open_regular(path: str | os.PathLike, error: type[Exception], what: str = "file"):
    """Regular file ``path`` opened for binary reading (None if absent); ``error`` for anything else."""
    fd = open_regular_fd(path, error, what)
    return None if fd is None else os.fdopen(fd, "rb")


def read_bytes(path: str | os.PathLike, limit: int, error: type[Exception], what: str = "file") -> bytes | None:
    """The contents of regular file ``path`` (None if absent), at most ``limit`` bytes (``error`` beyond them)."""
    f = open_regular(path, error, what)
    if f is None:
        return None
    with f:
        try:
            data = f.read(limit + 1)  # one byte past the limit tells "too big" from "exactly the limit"
        except OSError as e:
            raise error(f"{path}: cannot read {what}: {e.strerror or e}") from None
    if len(data) > limit:
        raise error(f"{path}: {what} is larger than {limit >> 20} MiB; refused (not a file of this kind?)")
    return data


def json_depth_exceeds(value: Any, limit: int) -> bool:
    """Whether ``value`` (parsed JSON) nests deeper than ``limit`` containers; iterative, so any depth is safe."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return False


def read_json_object(path: str | os.PathLike, error: type[Exception], limit: int = MAX_CONFIG_BYTES,
                     what: str = "JSON file") -> dict | None:
    """The JSON object stored in regular file ``path``, None if there is none; ``error`` naming the file for
    anything else (not a regular file, over ``limit`` bytes, not UTF-8, not JSON, nested deeper than
    :data:`MAX_JSON_DEPTH`, an integer too long to convert, not an object at top level)."""
    data = read_bytes(path, limit, error, what)
    if data is None:
        return None
    p = Path(path)
    try:
        value = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise error(f"{p}: {what} is not UTF-8 text: {e.reason} at byte {e.start}") from None
    except json.JSONDecodeError as e:
        raise error(f"{p}: not valid JSON: {e}") from None
    except RecursionError:
        raise error(f"{p}: {what} nests deeper than Python's JSON parser can follow; refused") from None
    except ValueError as e:  # "Exceeds the limit (4300 digits) for integer string conversion"
        raise error(f"{p}: {what} holds a value JSON cannot be read into: {str(e).split(';')[0]}") from None
    if json_depth_exceeds(value, MAX_JSON_DEPTH):
        raise error(f"{p}: {what} nests deeper than {MAX_JSON_DEPTH} levels; refused")
    if not isinstance(value, dict):
        raise error(f"{p}: expected a JSON object at top level, got {type(value).__name__}")
    return value
