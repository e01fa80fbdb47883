"""Which value of each scheduler setting is in force, and where it came from.

Three layers, each later one winning where it gives a value: the command line (or the built-in
default), the config file, and the changes made with gemsharectl (kept in the state file, so
they outlive a restart until `gemsharectl --reset-settings` drops them). A reload replaces the
config layer only: a setting changed with gemsharectl stays as it was set.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .parsing import Config
from .settings import Settings

# Settings that change while the scheduler runs, from any layer.
LIVE = ("tq", "anti_thrash", "min_slice_ms")
# Settings read when the scheduler starts: a reload that changes them says they wait for a
# restart.
AT_START = ("grace_ms", "capacity_mib", "context_reserve_mib", "staging_max_mib", "mps",
            "mps_pipe_directory",
            "cri_socket", "pod_resources_socket", "node_identity_socket", "compute_cap")
DEFAULT, COMMAND_LINE, GEMSHARECTL = "default", "command line", "gemsharectl"


def command_line_layer(settings: Settings) -> dict[str, tuple[object, str]]:
    """Each setting's value on the command line, with "command line" or "default" as its
    source."""
    values = {"tq": settings.tq, "anti_thrash": settings.mode,
              "min_slice_ms": settings.min_slice_ms, "grace_ms": settings.grace_ms,
              "capacity_mib": settings.capacity_mib, "staging_max_mib": settings.staging_max_mib,
              "context_reserve_mib": settings.context_reserve_mib, "mps": settings.mps,
              "mps_pipe_directory": settings.mps_pipe_directory,
              "cri_socket": settings.cri_socket,
              "pod_resources_socket": settings.pod_resources_socket,
              "node_identity_socket": settings.node_identity_socket,
              "compute_cap": settings.compute_cap}
    return {name: (value, COMMAND_LINE if name in settings.given else DEFAULT)
            for name, value in values.items()}


@dataclass
class Layers:
    command_line: dict[str, tuple[object, str]]
    config: Config | None = None
    runtime: dict[str, object] = field(default_factory=dict)  # LIVE settings only

    def value(self, name: str):
        if name in self.runtime:
            return self.runtime[name]
        given = self._in_file(name)
        if given is not None:
            return True if given != name else self.config.settings[name]
        return self.command_line[name][0]

    def source(self, name: str) -> str:
        if name in self.runtime:
            return GEMSHARECTL
        given = self._in_file(name)
        if given is not None:
            return self.config.source(given)
        return self.command_line[name][1]

    def _in_file(self, name: str) -> str | None:
        """The file's setting that gives `name`: itself, or for `mps` a daemon to adopt
        (`mps_pipe_directory` implies `mps`, as --mps-pipe-directory does); None if none."""
        settings = self.config.settings if self.config is not None else {}
        if name in settings:
            return name
        if name == "mps" and "mps_pipe_directory" in settings:
            return "mps_pipe_directory"
        return None

    def values(self, names=LIVE) -> dict:
        return {name: self.value(name) for name in names}

    def sources(self, names=LIVE) -> dict[str, str]:
        return {name: self.source(name) for name in names}

    def overridden(self) -> list[str]:
        """The settings given on the command line whose value in force comes from another
        layer (the config file, or gemsharectl's)."""
        return [name for name, (_, source) in self.command_line.items()
                if source == COMMAND_LINE and self.source(name) != COMMAND_LINE]
