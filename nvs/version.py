"""The version every gemshare command prints: the installed package's, one definition for all."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

DISTRIBUTION = "gemshare"
UNKNOWN = "unknown (not installed as a package)"


def version() -> str:
    """The package metadata's version; from a source tree that was never installed, the one in
    its pyproject.toml; else UNKNOWN."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        pass
    return _source_tree_version() or UNKNOWN


def _source_tree_version() -> str | None:
    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    try:
        text = pyproject.read_text()
    except OSError:
        return None
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as tomllib
        except ModuleNotFoundError:
            return None
    try:
        project = tomllib.loads(text).get("project", {})
    except tomllib.TOMLDecodeError:
        return None
    if project.get("name") != DISTRIBUTION or not isinstance(project.get("version"), str):
        return None
    return project["version"]
