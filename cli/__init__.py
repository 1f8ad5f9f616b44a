"""The ``modelgen`` command (``python -m modelgen.cli``): above both the compiler and the runtime (``command.py``)."""
from .command import build_parser, main

__all__ = ["build_parser", "main"]
