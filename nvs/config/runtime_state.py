"""The settings changed with gemsharectl, kept in a file so that a restart does not lose them.

The file is `settings.json` in the state directory (`--state-dir`, /var/lib/gemshare by default;
systemd's StateDirectory=gemshare makes it), replaced whole on every change: written beside it,
synced and renamed over it, so a crash leaves the old file or the new one, never half of one.
When the directory cannot be written the changes still apply, until the scheduler stops; the
reason is kept in `problem` for the log and for status.

Blocking: the server calls load and save off the event loop.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from pathlib import Path

from ..protocol import Mode
from .layers import LIVE
from .parsing import SETTING_CHECKS

log = logging.getLogger("gemshare.scheduler")

FILE_NAME = "settings.json"


def as_json(value):
    """A setting's value as the file and status write it: a mode by its label."""
    return value.label if isinstance(value, Mode) else value


class StateFile:
    def __init__(self, directory: Path | None):
        self.directory = directory
        self.path = None if directory is None else directory / FILE_NAME
        # Why changes are not kept, while they are not.
        self.problem: str | None = self._why_not_writable()

    def _why_not_writable(self) -> str | None:
        if self.directory is None:
            return "no state directory was given (--state-dir)"
        # The directory is made at the first change; until then its nearest existing parent
        # must let it be made.
        place = self.directory
        while not place.exists() and place != place.parent:
            place = place.parent
        if not os.access(place, os.W_OK | os.X_OK):
            return f"{place} is not writable by the scheduler"
        return None

    def load(self) -> dict:
        """The settings kept from the last run; entries that are no longer valid are left out
        with a warning, and an unreadable file counts as empty."""
        if self.path is None:
            return {}
        try:
            saved = json.loads(self.path.read_text(encoding="utf-8")).get("settings", {})
            if not isinstance(saved, dict):
                raise ValueError("'settings' is not an object")
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, AttributeError) as exc:
            log.warning("ignoring the settings kept in %s: cannot read them (%s)", self.path, exc)
            return {}
        kept = {}
        for name, value in saved.items():
            try:
                if name not in LIVE:
                    raise ValueError(f"{name} is not a setting gemsharectl changes")
                kept[name] = SETTING_CHECKS[name](value)
            except ValueError as exc:
                log.warning("ignoring a setting kept in %s: %s", self.path, exc)
        return kept

    def save(self, values: dict) -> bool:
        """Replace the file with `values`; False (and `problem` says why) when it cannot be."""
        if self.directory is None:
            return False
        text = json.dumps({"settings": {k: as_json(v) for k, v in values.items()}}, indent=2)
        temporary = None
        try:
            self.directory.mkdir(mode=0o755, parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=self.directory, prefix=f".{FILE_NAME}.",
                                             delete=False, encoding="utf-8") as out:
                temporary = out.name
                out.write(text + "\n")
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, self.path)
            temporary = None
            directory = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(directory)  # the rename itself survives a crash
            finally:
                os.close(directory)
        except OSError as exc:
            self.problem = f"cannot write {self.path}: {exc.strerror or exc}"
            return False
        finally:
            if temporary is not None:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
        self.problem = None
        return True
