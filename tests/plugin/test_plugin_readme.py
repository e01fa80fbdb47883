"""The README documents every gemshare-device-plugin option, and the resource's name."""

from __future__ import annotations

import re

from plugin_helpers import REPO

from gemshare_plugin.cli import DEFAULT_LIBRARY, DEFAULT_RESOURCE, DEFAULT_SOCKET_DIR, option_names

README = (REPO / "README.md").read_text()


def plugin_options_table() -> str:
    return README.split("### gemshare-device-plugin options", 1)[1].split("\n\n", 2)[1]


def test_every_option_is_in_the_plugins_table():
    table = plugin_options_table()
    options = option_names()
    assert "--slots" in options
    missing = sorted(option for option in options
                     if not re.search(rf"`{re.escape(option)}[ `]", table))
    assert missing == [], f"README's gemshare-device-plugin table lacks {missing}"


def test_the_defaults_in_the_table_are_the_codes():
    table = plugin_options_table()
    for default in (DEFAULT_SOCKET_DIR, DEFAULT_RESOURCE, DEFAULT_LIBRARY):
        assert f"`{default}`" in table
