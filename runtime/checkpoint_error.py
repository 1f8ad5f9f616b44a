"""The one error every checkpoint reader raises (the loader, the quantized views, the MTP draft's view).

It stands apart from ``runtime/loader/`` so that the layers that load their own tensors (``runtime/layers/mtp.py``) can
name it without importing the loader, which sits above the layers.
"""


class CheckpointError(Exception):
    """A checkpoint could not be read.  The message names the file and/or tensor concerned."""
