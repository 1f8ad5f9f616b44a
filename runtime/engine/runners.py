"""Kept for imports written against this path: :class:`Work` lives in runtime/work.py, below the engine, because
the targets' runners and the parallel launcher build and read it too."""
from ..work import Work, pad_tables

__all__ = ["Work", "pad_tables"]
