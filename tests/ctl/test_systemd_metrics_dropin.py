"""The drop-in that turns on the metrics for the service: it opens the address families HTTP
needs, gives --metrics an address the scheduler takes, and systemd accepts it with the unit."""

from __future__ import annotations

from test_systemd_units import SERVICE, UNITS, drop_in_values, installed_with_drop_in, read_unit

from gemshare_nvs.observe.tcp_address import parse_address

DROP_IN = UNITS / "gemshare-scheduler.service.d" / "metrics.conf.example"


def test_the_drop_in_widens_the_address_families_and_adds_metrics():
    assert read_unit(SERVICE)["Service"]["RestrictAddressFamilies"] == "AF_UNIX"
    families = drop_in_values(DROP_IN, "RestrictAddressFamilies")
    assert families[0] == ""  # the list starts afresh
    assert set(families[-1].split()) == {"AF_UNIX", "AF_INET", "AF_INET6"}
    commands = drop_in_values(DROP_IN, "ExecStart")
    assert commands[0] == ""  # else systemd would keep the unit's command beside this one
    program, *options = commands[-1].split()
    assert program == read_unit(SERVICE)["Service"]["ExecStart"].split()[0]
    metrics = options[options.index("--metrics") + 1]
    assert parse_address(metrics) == ("127.0.0.1", 9410)


def test_systemd_analyze_verify_accepts_the_unit_with_the_drop_in(tmp_path):
    installed = installed_with_drop_in(tmp_path, DROP_IN)
    conf = installed.with_name(f"{SERVICE.name}.d") / "metrics.conf"
    assert "--metrics 127.0.0.1:9410" in conf.read_text()
