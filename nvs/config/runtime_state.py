"""The settings changed with gemsharectl, kept in a file so that a restart does not lose them.

The file is `settings.json` in the state directory (`--state-dir`, /var/lib/gemshare by default;
systemd's StateDirectory=gemshare makes it), replaced whole on every change: written beside it,
synced and renamed over it, so a crash leaves the old file or the new one, never half of one.
When the directory cannot be written the changes still apply, until the scheduler stops; the
reason is kept in `problem` for the log and for status.

Whatever is found in the directory, the scheduler starts: the file is read only when it is a
regular file of a bounded size holding JSON of a bounded depth, and anything else is ignored
with one warning. Copies left half-written by a scheduler that stopped while saving
(`.settings.json.*`) are removed when it starts again.

Blocking: the server calls load and save off the event loop.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from pathlib import Path

from ..protocol import MAX_JSON_DEPTH, Mode, json_depth
from .layers import LIVE
from .parsing import SETTING_CHECKS
from .regular_file import NotReadable, kind_of, read_regular

log = logging.getLogger("gemshare.scheduler")

FILE_NAME = "settings.json"
TEMPORARY_PREFIX = f".{FILE_NAME}."  # a copy being written, before it is renamed into place
# The file holds a handful of settings: a few hundred bytes.
MAX_STATE_BYTES = 64 << 10


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
        try:
            return self._blocker()
        except OSError as exc:
            return f"cannot look at {self.directory}: {exc.strerror or exc}"

    def _blocker(self) -> str | None:
        """What stands in the way of writing the file, seen without writing anything."""
        if self.directory.exists() and not self.directory.is_dir():
            return f"{self.directory} is not a directory"
        kind = self._file_kind()
        if kind == "a directory":  # a rename cannot replace it, so no change could be kept
            return f"{self.path} is {kind}, not a file; remove it"
        # The directory is made at the first change; until then its nearest existing parent
        # must let it be made.
        place = self.directory
        while not place.exists() and place != place.parent:
            place = place.parent
        if not os.access(place, os.W_OK | os.X_OK):
            return f"{place} is not writable by the scheduler"
        return None

    def _file_kind(self) -> str | None:
        """What the state file is when it is there but not a regular file; else None."""
        try:
            return kind_of(os.lstat(self.path).st_mode)
        except OSError:
            return None

    def load(self) -> dict:
        """The settings kept from the last run; entries that are no longer valid are left out
        with a warning, and an unreadable file counts as empty (with one warning, or none where
        `problem` already says why). Copies an earlier run left half-written are removed."""
        if self.path is None:
            return {}
        self._remove_leftovers()
        try:
            saved = self._read()
        except FileNotFoundError:
            return {}
        except (NotReadable, ValueError) as exc:
            if self.problem is None:  # else the warning of `problem` says it (announce)
                log.warning("ignoring the settings kept in %s: %s", self.path, exc)
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

    def _read(self) -> dict:
        """The file's "settings" object; ValueError or NotReadable when it does not hold one."""
        data = read_regular(self.path, MAX_STATE_BYTES)
        try:
            document = json.loads(data.decode("utf-8"))
        except RecursionError:
            raise ValueError(f"its JSON nests more than {MAX_JSON_DEPTH} levels deep") from None
        if json_depth(document) > MAX_JSON_DEPTH:
            raise ValueError(f"its JSON nests more than {MAX_JSON_DEPTH} levels deep")
        saved = document.get("settings", {}) if isinstance(document, dict) else None
        if not isinstance(saved, dict):
            raise ValueError("it is not an object with a 'settings' object in it")
        return saved

    def _remove_leftovers(self) -> None:
        """Remove the copies being written when an earlier scheduler stopped: nothing else
        writes here, and they would pile up with every crash."""
        removed = 0
        try:
            with os.scandir(self.directory) as entries:
                for entry in entries:
                    if entry.name.startswith(TEMPORARY_PREFIX) and \
                            entry.is_file(follow_symlinks=False):
                        with contextlib.suppress(OSError):
                            os.unlink(entry.path)
                            removed += 1
        except OSError:
            return  # no directory yet, or not one to list: nothing was left there
        if removed:
            log.info("removed %d unfinished cop%s of %s left by an earlier run", removed,
                     "y" if removed == 1 else "ies", self.path)

    def save(self, values: dict) -> bool:
        """Replace the file with `values`; False (and `problem` says why) when it cannot be."""
        if self.directory is None:
            return False
        text = json.dumps({"settings": {k: as_json(v) for k, v in values.items()}}, indent=2)
        temporary = None
        try:
            self.directory.mkdir(mode=0o755, parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=self.directory, prefix=TEMPORARY_PREFIX,
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
