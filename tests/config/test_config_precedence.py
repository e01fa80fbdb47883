"""Which value of a setting is in force: command line < config file < gemsharectl, each value
with its source."""

from __future__ import annotations

from pathlib import Path

from gemshare_nvs.config.layers import Layers, command_line_layer
from gemshare_nvs.config.parsing import parse as parse_config
from gemshare_nvs.protocol import Mode
from gemshare_nvs.service.command_line import parse

PATH = "/etc/gemshare/gemshare.toml"


def layers(argv=(), config_text=None, runtime=None) -> Layers:
    settings = parse(["--socket", "/tmp/x.sock", *argv])
    config = None if config_text is None else parse_config(config_text, PATH)
    return Layers(command_line_layer(settings), config, dict(runtime or {}))


def test_defaults_and_command_line_values_say_which_they_are():
    given = layers(["--tq", "10"])
    assert given.values() == {"tq": 10, "anti_thrash": Mode.ON, "min_slice_ms": 300}
    assert given.sources() == {"tq": "command line", "anti_thrash": "default",
                               "min_slice_ms": "default"}


def test_the_config_file_wins_over_the_command_line():
    given = layers(["--tq", "10", "--anti-thrash", "auto"], "\ntq = 45\n")
    assert given.values()["tq"] == 45 and given.source("tq") == f"config ({PATH}:2)"
    assert (given.value("anti_thrash"), given.source("anti_thrash")) == (Mode.AUTO,
                                                                         "command line")


def test_gemsharectl_wins_over_both_and_clearing_it_uncovers_the_file():
    given = layers(["--tq", "10"], "tq = 45\n", runtime={"tq": 7})
    assert (given.value("tq"), given.source("tq")) == (7, "gemsharectl")
    given.runtime.clear()
    assert given.value("tq") == 45


def test_settings_read_at_start_layer_the_same_way():
    given = layers(["--grace-ms", "500", "--capacity-mib", "100"], "grace_ms = 800\n")
    assert given.values(("grace_ms", "capacity_mib", "context_reserve_mib")) == {
        "grace_ms": 800, "capacity_mib": 100, "context_reserve_mib": 512}
    assert given.source("capacity_mib") == "command line"


def test_the_command_line_names_the_files():
    settings = parse(["--config", "/srv/gs.toml", "--state-dir", "/srv/state"])
    assert (settings.config, settings.state_dir) == (Path("/srv/gs.toml"), Path("/srv/state"))
    settings = parse([])
    assert (settings.config, settings.state_dir) == (Path("/etc/gemshare/gemshare.toml"),
                                                     Path("/var/lib/gemshare"))
    assert parse(["--config", ""]).config is None  # no config file at all


def test_overridden_names_the_command_line_settings_another_layer_beats():
    given = layers(["--tq", "10", "--min-slice-ms", "200", "--grace-ms", "500"],
                   "tq = 45\ngrace_ms = 800\nanti_thrash = \"auto\"\n",
                   runtime={"min_slice_ms": 100})
    # anti_thrash was not given on the command line: a default beaten is nothing lost.
    assert given.overridden() == ["tq", "min_slice_ms", "grace_ms"]
    assert layers(["--tq", "10"]).overridden() == []
