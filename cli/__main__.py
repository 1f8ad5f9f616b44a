"""``python -m modelgen.cli``: the ``modelgen`` command."""
import sys

from .command import main

sys.exit(main())
