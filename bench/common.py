"""What every bench script prints through: one timestamped, flushed line (the GPU sessions tee it into their logs).

It lives here, below ``decode.py`` and ``kernel_profile.py``, so that the scripts that share helpers do not import
each other in a loop.
"""
from __future__ import annotations

import time


def log(*a) -> None:
    print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)
