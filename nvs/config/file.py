"""The config file on disk: reading it, and telling when it has changed.

Blocking (the file may sit on a network filesystem): the server calls these off the event loop.
"""

from __future__ import annotations

import os
from pathlib import Path

from .parsing import Config, ConfigError, Names, Problem, parse
from .regular_file import NotReadable, read_regular
from .shadows import Shadow, shadows

# A config file is a few KiB; 1 MiB holds some 10,000 rules. Past it the file is refused
# unread, so that reading and parsing it stay short.
MAX_CONFIG_BYTES = 1 << 20

# What changes when the file is rewritten, replaced or removed; None while there is no file.
Signature = tuple[int, int, int, int] | None


def read(path: Path, names: Names = Names()) -> Config:
    """The file's Config; FileNotFoundError when there is no file, ConfigError when it cannot
    be read (not a regular file, too big) or is not valid."""
    try:
        data = read_regular(path, MAX_CONFIG_BYTES)
    except NotReadable as exc:
        raise ConfigError(str(path), [Problem(None, "", str(exc))]) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise ConfigError(str(path), [Problem(line, "", "not UTF-8 text")]) from None
    return parse(text, str(path), names)


def read_with_dead_rules(path: Path) -> tuple[Config, list[Shadow]]:
    """read(path), and the rules of it that can never match: both take a while for a big
    file, so they are worked out together, off the event loop."""
    config = read(path)
    return config, shadows(config)


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
