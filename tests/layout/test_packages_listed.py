"""Every Python package folder of the tree is in pyproject.toml's package list: one left out is
missing from every wheel and sdist install, where the checkout's editable install still finds
it (a moved module once passed every in-tree test and failed each install's first import)."""

from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]


def test_every_package_folder_is_listed():
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = set()
    for package, folder in setuptools["package-dir"].items():
        for init in (REPO / folder).rglob("__init__.py"):
            inner = init.parent.relative_to(REPO / folder).parts
            found.add(".".join((package, *inner)))
    assert found - set(setuptools["packages"]) == set()
    assert set(setuptools["packages"]) - found == set()
