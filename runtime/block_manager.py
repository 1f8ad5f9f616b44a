"""Paged KV-cache block allocation: a free list of fixed-size blocks and one block table per sequence."""
from __future__ import annotations

from .kv_cache import CacheFullError  # declared with the caches (the state pool raises it too); raised here


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int):
        for name, value in (("num_blocks", num_blocks), ("block_size", block_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} = {value!r}: expected a positive integer")
        self.num_blocks, self.block_size = num_blocks, block_size
        self.free: list[int] = list(range(num_blocks - 1, -1, -1))  # pop() hands out low ids first
        self.tables: dict[int, list[int]] = {}

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def can_allocate(self, seq_id: int, num_tokens: int) -> bool:
        have = len(self.tables.get(seq_id, []))
        return self.blocks_needed(num_tokens) - have <= len(self.free)

    def ensure(self, seq_id: int, num_tokens: int) -> list[int]:
        """Grow ``seq_id``'s table to hold ``num_tokens`` tokens; CacheFullError if blocks run out."""
        table = self.tables.get(seq_id, [])
        need = self.blocks_needed(num_tokens) - len(table)
        if need > len(self.free):  # checked before the table exists: a refused sequence leaves no entry behind
            raise CacheFullError(
                f"KV cache full: sequence {seq_id} needs {need} more block(s) of {self.block_size} tokens, "
                f"{len(self.free)} free of {self.num_blocks}"
            )
        self.tables[seq_id] = table
        for _ in range(need):
            table.append(self.free.pop())
        return table

    def release(self, seq_id: int) -> None:
        for block in reversed(self.tables.pop(seq_id, [])):
            self.free.append(block)

    @property
    def num_free(self) -> int:
        return len(self.free)

    def slot(self, seq_id: int, position: int) -> int:
        table = self.tables[seq_id]
        return table[position // self.block_size] * self.block_size + position % self.block_size
