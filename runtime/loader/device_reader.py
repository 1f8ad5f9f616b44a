"""Checkpoint -> GPU reader: parallel positional reads into pinned buffers, asynchronous host-to-device copies.

``safetensors.torch.load_file(f)`` + ``.to("cuda")`` copies every byte twice on one thread (file -> pageable tensor,
pageable -> device through the driver's bounce buffer). Here each tensor is split into chunks; a pool of threads
reads each chunk with ``os.preadv`` straight into that thread's pinned buffer (the GIL is released during the read)
and copies it to the destination on the thread's own CUDA stream. The consumer asks for tensors in file order and
gets device tensors whose copies are complete; at most ``window`` bytes are read ahead, so peak extra device memory
stays bounded. Tensors are returned with the checkpoint's dtype and shape (conversion, if any, is the consumer's).
"""
from __future__ import annotations

import os
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from .checkpoint import SAFETENSORS_DTYPES, Checkpoint, CheckpointError
from .files import open_regular_fd

CHUNK = 32 << 20


class DeviceReader:
    def __init__(self, checkpoint: Checkpoint, keys: list[str], device: torch.device, num_threads: int = 16,
                 window: int = 2 << 30):
        self.ckpt, self.device = checkpoint, torch.device(device)
        self.window = window
        self._fds: dict[str, int] = {}
        self._data_start: dict[str, int] = {}
        self._local = threading.local()
        self._all_local: list = []
        self._lock = threading.Lock()
        self.pool = ThreadPoolExecutor(max(1, num_threads), thread_name_prefix="modelgen-gpu-load")
        self.order = [k for k in keys if self.supported(k)]
        self._queue = deque(self.order)
        self._pending: dict[str, tuple[torch.Tensor, list[Future]]] = {}
        self._pending_bytes = 0

    def supported(self, key: str) -> bool:
        info = self.ckpt._info(key)
        return SAFETENSORS_DTYPES.get(info.dtype, (None, None))[0] is not None

    def _fd(self, path) -> tuple[int, int]:
        p = str(path)
        if p not in self._fds:
            fd = open_regular_fd(p, CheckpointError, "safetensors file")  # still the regular file the header was
            if fd is None:
                raise CheckpointError(f"{p}: safetensors file disappeared while loading")
            header_len = int.from_bytes(os.pread(fd, 8, 0), "little")
            self._fds[p], self._data_start[p] = fd, 8 + header_len
        return self._fds[p], self._data_start[p]

    def _thread_state(self):
        st = getattr(self._local, "state", None)
        if st is None:
            buf = torch.empty(CHUNK, dtype=torch.uint8, pin_memory=True)
            st = (buf, memoryview(buf.numpy()), torch.cuda.Stream(self.device))
            self._local.state = st
            with self._lock:
                self._all_local.append(st)
        return st

    def _copy_chunk(self, fd: int, offset: int, dst: torch.Tensor, ready: torch.cuda.Event) -> None:
        buf, view, stream = self._thread_state()
        n = dst.numel()
        got = 0
        while got < n:
            r = os.preadv(fd, [view[got:n]], offset + got)
            if r <= 0:
                raise OSError(f"short read at byte {offset + got}")
            got += r
        with torch.cuda.stream(stream):
            # dst may reuse memory the consumer's stream freed with work still queued: order after that work.
            stream.wait_event(ready)
            dst.copy_(buf[:n], non_blocking=True)
        stream.synchronize()  # the pinned buffer is reused by this thread's next chunk

    def _submit_next(self) -> None:
        key = self._queue.popleft()
        info = self.ckpt._info(key)
        fd, start = self._fd(info.file)
        nbytes = info.end - info.begin
        dst = torch.empty(nbytes, dtype=torch.uint8, device=self.device)  # allocated on the consumer's stream
        ready = torch.cuda.Event()
        ready.record()
        futures = [
            self.pool.submit(self._copy_chunk, fd, start + info.begin + o, dst[o : o + CHUNK], ready)
            for o in range(0, nbytes, CHUNK)
        ]
        self._pending[key] = (dst, futures)
        self._pending_bytes += nbytes

    def get(self, key: str) -> torch.Tensor:
        """The tensor ``key`` on the device (keys should be asked for in ``keys`` order for read-ahead to help)."""
        if key not in self._pending and key not in self._queue:
            raise KeyError(key)
        while self._queue and (key not in self._pending or self._pending_bytes < self.window):
            self._submit_next()
        dst, futures = self._pending.pop(key)
        self._pending_bytes -= dst.numel()
        for f in futures:
            f.result()
        info = self.ckpt._info(key)
        dtype = SAFETENSORS_DTYPES[info.dtype][0]
        if dst.numel() == 0:
            return torch.empty(info.shape, dtype=dtype, device=self.device)
        return dst.view(dtype).view(info.shape)

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __enter__(self) -> "DeviceReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def file_order(checkpoint: Checkpoint, keys) -> list[str]:
    """``keys`` sorted by (file, byte offset): sequential reads, one file at a time."""
    files = {str(f): i for i, f in enumerate(checkpoint.files)}

    def where(k):
        info = checkpoint._info(k)
        return files.get(str(info.file), 0), info.begin

    return sorted(keys, key=where)
