"""The drop-in that turns on the metrics for the service: it opens the address families HTTP
needs, gives --metrics an address the scheduler takes, and systemd accepts it with the unit."""

from __future__ import annotations

import sys
from pathlib import Path

from test_systemd_units import SERVICE, UNITS, read_unit, units_to_verify, verified

from gemshare_nvs.observe.tcp_address import parse_address

DROP_IN = UNITS / "gemshare-scheduler.service.d" / "metrics.conf.example"


def drop_in_lines(key: str) -> list[str]:
    """Every value given to `key`, in order (a drop-in may assign a key more than once)."""
    return [line.split("=", 1)[1] for line in DROP_IN.read_text().splitlines()
            if line.startswith(f"{key}=")]


def test_the_drop_in_widens_the_address_families_and_adds_metrics():
    assert read_unit(SERVICE)["Service"]["RestrictAddressFamilies"] == "AF_UNIX"
    families = drop_in_lines("RestrictAddressFamilies")
    assert families[0] == ""  # the list starts afresh
    assert set(families[-1].split()) == {"AF_UNIX", "AF_INET", "AF_INET6"}
    commands = drop_in_lines("ExecStart")
    assert commands[0] == ""  # else systemd would keep the unit's command beside this one
    program, *options = commands[-1].split()
    assert program == read_unit(SERVICE)["Service"]["ExecStart"].split()[0]
    metrics = options[options.index("--metrics") + 1]
    assert parse_address(metrics) == ("127.0.0.1", 9410)


def test_systemd_analyze_verify_accepts_the_unit_with_the_drop_in(tmp_path):
    analyze, pointed = units_to_verify(tmp_path)
    drop_ins = tmp_path / f"{SERVICE.name}.d"
    drop_ins.mkdir()
    text = pointed(DROP_IN.read_text())
    scheduler = Path(sys.executable).with_name("gemshare-scheduler")
    assert f"ExecStart={scheduler} --metrics" in text
    (drop_ins / "metrics.conf").write_text(text)
    verified(analyze, tmp_path / SERVICE.name)
