"""The config file on disk: reading it, and telling when it has changed.

Blocking (the file may sit on a network filesystem): the server calls these off the event loop.
"""

from __future__ import annotations

import os
from pathlib import Path

from .parsing import Config, ConfigError, Names, Problem, parse

# What changes when the file is rewritten, replaced or removed; None while there is no file.
Signature = tuple[int, int, int, int] | None


def read(path: Path, names: Names = Names()) -> Config:
    """The file's Config; FileNotFoundError when there is no file, ConfigError when it cannot
    be read or is not valid."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise ConfigError(str(path), [Problem(None, "", f"cannot read it: "
                                                        f"{exc.strerror or exc}")]) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise ConfigError(str(path), [Problem(line, "", "not UTF-8 text")]) from None
    return parse(text, str(path), names)


def read_if_present(path: Path | None) -> Config | None:
    """The Config at `path`; None when no file is configured or there is none there."""
    if path is None:
        return None
    try:
        return read(path)
    except FileNotFoundError:
        return None


def signature(path: Path) -> Signature:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns
