"""Kept for imports written against this path: the block manager lives in runtime/block_manager.py, below the
engine, because the targets' runners, the parallel layouts and the state cache use it too."""
from ..block_manager import BlockManager, CacheFullError

__all__ = ["BlockManager", "CacheFullError"]
