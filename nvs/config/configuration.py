"""The scheduler's configuration while it runs: its settings in layers (layers.py), the config
file's rules, and what a reload or a gemsharectl change does to the policy.

The server reads files off the event loop and hands the outcome here; this module decides what
changes, tells the policy and logs it. A bad or vanished file changes nothing: the last good
configuration stays in force, and `problem` says why for status.
"""

from __future__ import annotations

import logging
import time

from ..core.model.terms import no_rules
from ..core.policy import Policy
from .control import SetRequest
from .file import Signature, read_if_present, signature
from .idle_terms import idle_terms
from .layers import AT_START, GEMSHARECTL, LIVE, Layers, command_line_layer
from .parsing import Config, ConfigError
from .runtime_state import StateFile, as_json
from .settings import Settings
from .shadows import Shadow, shadows

log = logging.getLogger("gemshare.scheduler")


class Configuration:
    def __init__(self, settings: Settings, config: Config | None, state: StateFile,
                 saved: dict):
        self.path = settings.config
        self.state = state
        self.layers = Layers(command_line_layer(settings), config, saved)
        # What the scheduler starts with; AT_START settings keep these until it restarts.
        self.started = self.layers.values((*LIVE, *AT_START))
        self.started_from = self.layers.sources(AT_START)
        self.loaded_at = time.time() if config is not None else None
        self.problem: str | None = None  # why the file in force is not what is on disk
        # The file as it was when last read (config_file.signature), to see when it changes.
        self.signature: Signature = None

    @classmethod
    def start(cls, settings: Settings) -> "Configuration":
        """The configuration a scheduler starts with. Blocking; ConfigError for a bad file (a
        scheduler does not start on one: there is no earlier configuration to keep)."""
        state = StateFile(settings.state_dir)
        seen = None if settings.config is None else signature(settings.config)
        configuration = cls(settings, read_if_present(settings.config), state, state.load())
        configuration.signature = seen
        return configuration

    @property
    def config(self) -> Config | None:
        """The file in force: the last good one read."""
        return self.layers.config

    @property
    def rules(self):
        return no_rules if self.config is None else self.config.terms

    def announce(self) -> None:
        """Log where the starting configuration came from."""
        if self.config is not None:
            log.info("config %s: %s%s", self.path, _rules(self.config), self._settings_words())
            _warn_dead_rules(self.config, shadows(self.config))
        elif self.path is not None:
            log.info("no config file at %s: command-line settings only, no rules", self.path)
        if self.layers.runtime:
            log.info("settings changed with gemsharectl before the last stop, kept in %s: %s",
                     self.state.path, self._words(self.layers.runtime))
        self._warn_overridden(self.layers.overridden())
        self._warn_idle_terms()
        if self.state.problem:
            self.warn_temporary()

    def _warn_idle_terms(self) -> None:
        """Terms and settings that do nothing with the settings in force (idle_terms.py)."""
        values = {**self.started, **self.layers.values()}
        sources = {**self.started_from, **self.layers.sources()}
        for line in idle_terms(self.config, values, sources):
            log.warning("%s", line)

    def _warn_overridden(self, names) -> None:
        """A command-line setting that another layer overrides is named, with the way back: a
        value the user typed must never lose without a word."""
        for name in names:
            given, value = self.layers.command_line[name][0], self.layers.value(name)
            option = f"--{name.replace('_', '-')}"
            if self.layers.source(name) == GEMSHARECTL:
                log.warning("%s %s on the command line is overridden by %s %s, set with "
                            "gemsharectl and kept in %s: 'gemsharectl --reset-settings' drops "
                            "the settings changed with gemsharectl, and the command line's "
                            "apply again", option, as_json(given), name, as_json(value),
                            self.state.path)
            else:
                log.warning("%s %s on the command line is overridden by %s %s in %s: remove "
                            "it from the file for the command line's to apply", option,
                            as_json(given), name, as_json(value), self.layers.source(name))

    def warn_temporary(self) -> None:
        log.warning("changes made with gemsharectl will last only until the scheduler stops: %s",
                    self.state.problem)

    @staticmethod
    def _words(values: dict) -> str:
        return ", ".join(f"{name} {as_json(value)}" for name, value in values.items())

    def _settings_words(self) -> str:
        given = self.config.settings if self.config else {}
        return f"; {self._words(given)}" if given else ""

    # ----- changes ------------------------------------------------------------------------

    def _configure(self, policy: Policy, before: dict, now: float, given=()) -> list:
        """Tell the policy the live settings that changed (and those in `given`, which a
        gemsharectl set announces to the clients even when unchanged)."""
        after = self.layers.values()
        changed = {name: after[name] for name in LIVE if after[name] != before[name]
                   or name in given}
        if not changed:
            return []
        return policy.configure(now, tq=changed.get("tq"), mode=changed.get("anti_thrash"),
                                min_slice_ms=changed.get("min_slice_ms"))

    def loaded(self, config: Config, dead: list[Shadow], policy: Policy, now: float,
               why: str) -> list:
        """A new good file: its rules and settings apply (below gemsharectl's changes). `dead`
        are its rules that can never match (file.read_with_dead_rules)."""
        before = self.layers.values()
        self.layers.config = config
        self.loaded_at, self.problem = time.time(), None
        log.info("config %s reloaded (%s): %s%s", self.path, why, _rules(config),
                 self._settings_words())
        _warn_dead_rules(config, dead)
        self._warn_idle_terms()
        for name in AT_START:
            if self.layers.value(name) != self.started[name]:
                log.warning("config %s: %s %s takes effect when the scheduler restarts (now %s)",
                            self.path, name, as_json(self.layers.value(name)),
                            as_json(self.started[name]))
        self._warn_overridden(name for name in self.layers.overridden()
                              if self.layers.source(name) != GEMSHARECTL)
        for name in LIVE:
            if name in config.settings and name in self.layers.runtime:
                log.info("config %s: %s %s is not used while the value set with gemsharectl "
                         "(%s) stands; gemsharectl --reset-settings drops it", self.path, name,
                         as_json(config.settings[name]), as_json(self.layers.runtime[name]))
        return policy.set_rules(config.terms, now) + self._configure(policy, before, now)

    def refused(self, error: ConfigError, why: str) -> None:
        """A bad file: nothing changes."""
        self.problem = f"{error.words()}: {error}"
        kept = "the configuration loaded before stays" if self.config is not None \
            else "no config file is in force"
        for line in error.lines():
            log.error("config refused (%s): %s", why, line)
        log.error("config %s refused as a whole: %s; fix it (gemsharectl config check %s)",
                  self.path, kept, self.path)

    def vanished(self, why: str) -> None:
        """The file is gone: keep what was loaded (deleting the file is no way to drop rules;
        an empty file is)."""
        if self.config is None:
            log.info("no config file at %s (%s): nothing to reload", self.path, why)
            return
        self.problem = "the file is gone; the configuration loaded before stays"
        log.warning("config %s is gone (%s): keeping the configuration loaded from it at %s",
                    self.path, why, time.strftime("%Y-%m-%d %H:%M:%S",
                                                  time.localtime(self.loaded_at)))

    def runtime_after(self, request: SetRequest) -> dict:
        """gemsharectl's settings as `request` would leave them; nothing changes yet."""
        return {**({} if request.clear else self.layers.runtime), **request.values}

    def set(self, request: SetRequest, policy: Policy, now: float) -> list:
        """gemsharectl's setting changes, on top of everything else."""
        before = self.layers.values()
        self.layers.runtime = self.runtime_after(request)
        return self._configure(policy, before, now, given=request.values)

    # ----- status ---------------------------------------------------------------------------

    def status(self) -> dict:
        """Where each setting comes from, the config file and the kept changes, for status."""
        return {
            "settings_from": {**self.layers.sources(), **self.started_from},
            "config": {"path": None if self.path is None else str(self.path),
                       "loaded": self.config is not None,
                       "rules": len(self.config.rules) if self.config else 0,
                       "loaded_at": None if self.loaded_at is None else round(self.loaded_at, 3),
                       "problem": self.problem},
            "runtime_settings": {"values": {k: as_json(v) for k, v in self.layers.runtime.items()},
                                 "path": None if self.state.path is None
                                 else str(self.state.path),
                                 "persistent": self.state.problem is None,
                                 "problem": self.state.problem},
        }


def _rules(config: Config) -> str:
    return f"{len(config.rules)} rule{'' if len(config.rules) == 1 else 's'}"


def _warn_dead_rules(config: Config, dead: list[Shadow]) -> None:
    """A rule that can never match is allowed, but most likely not what was meant."""
    for shadow in dead:
        log.warning("config %s", shadow.warning(config.path))
