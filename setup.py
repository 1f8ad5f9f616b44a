"""Package layout only (metadata is in pyproject.toml).

Import names live under ``modelgen.`` — PyPI has unrelated ``codegen`` and ``runtime`` packages, and ``generated`` is
generic — while the repository keeps its top-level folders. Every package under ``codegen/``, ``runtime/``,
``generated/`` and ``cli/`` is installed as ``modelgen.<folder>...``; ``modelgen/__init__.py`` does the same mapping
in a source checkout by extending its search path to the repository root.
"""
from setuptools import find_packages, setup

FOLDERS = ("codegen", "runtime", "generated", "cli")
found = [p for p in find_packages(include=[f"{f}*" for f in FOLDERS])]
setup(
    packages=["modelgen"] + [f"modelgen.{p}" for p in found],
    package_dir={"modelgen": "modelgen", **{f"modelgen.{f}": f for f in FOLDERS}},
)
