"""Is a generated model package the output of its spec and templates as they are now?

Every generated file carries a banner with the source hash of its build: the spec's text (and its bases' through
``extends:``), the digest of the templates it renders with and the generator version (``lower.compile_spec``,
``lower.templates_digest``). After a spec or template edit whose build failed -- or was never run -- the committed
package is stale: running it would run code the spec no longer describes. ``modelgen run`` refuses that
(:func:`stale_reason`); ``modelgen check`` is the byte-exact version of the same question for the whole tree.
"""
from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

from . import cache
from .errors import ModelgenError
from .lower import compile_spec
from .spec_file import REPO_ROOT, display_path

class StaleGeneratedError(ModelgenError):
    """The generated package does not match its spec and templates (``modelgen run`` refuses to run it)."""


BANNER_HASH = re.compile(r"^# source hash \(spec \+ templates \+ generator\): ([0-9a-f]+)$", re.MULTILINE)


def banner_hashes(package_dir: Path) -> dict[str, str | None]:
    """Each generated ``.py`` file of a package -> the source hash in its banner (None: no banner)."""
    out: dict[str, str | None] = {}
    for p in sorted(package_dir.glob("*.py")):
        m = BANNER_HASH.search(p.read_text(encoding="utf-8", errors="replace")[:2000])
        out[p.name] = m.group(1) if m else None
    return out


def stale_reason(module: ModuleType) -> str | None:
    """Why ``module`` (a generated model package) does not match its spec and templates, or None when it does.

    Nothing can be said (None) when the spec file is not there (an installed package without specs/)."""
    spec_rel = getattr(module, "SPEC", None)
    module_file = getattr(module, "__file__", None)
    if not spec_rel or not module_file:
        return None
    spec = REPO_ROOT / spec_rel
    if not spec.is_file():
        return None
    package_dir = Path(module_file).parent
    where = display_path(package_dir)
    try:
        entry = cache.lookup(spec)  # the spec and templates as they are now, without compiling when unchanged
        expected = entry.summary.source_hash if entry is not None else compile_spec(spec).source_hash
    except ModelgenError as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        return (f"{where} was generated from an earlier version of {spec_rel}, which no longer builds ({first}); "
                f"fix the spec and run `modelgen build {spec_rel}`")
    for name, found in banner_hashes(package_dir).items():
        if found != expected:
            return (f"{where}/{name} is stale: its banner hash {found} is not the hash of {spec_rel} + templates/ "
                    f"now ({expected}); run `modelgen build {spec_rel}` (or `modelgen check` to see the difference)")
    return None
