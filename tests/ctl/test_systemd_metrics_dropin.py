"""The drop-in that turns on the metrics for the service: it opens the address families HTTP
needs, gives --metrics an address the scheduler takes, and systemd accepts it with the unit."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gemshare_nvs.metrics_http import parse_address

from test_systemd_units import SERVICE, SOCKET, UNITS, read_unit

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
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    scheduler = Path(sys.executable).with_name("gemshare-scheduler")
    if not scheduler.exists():
        pytest.skip(f"{scheduler} is not installed")
    installed = read_unit(SERVICE)["Service"]["ExecStart"]

    def pointed(text: str) -> str:  # verify insists that ExecStart exists
        return text.replace(f"ExecStart={installed}", f"ExecStart={scheduler}")
    (tmp_path / SERVICE.name).write_text(pointed(SERVICE.read_text()))
    shutil.copy(SOCKET, tmp_path / SOCKET.name)
    drop_ins = tmp_path / f"{SERVICE.name}.d"
    drop_ins.mkdir()
    text = pointed(DROP_IN.read_text())
    assert f"ExecStart={scheduler} --metrics" in text
    (drop_ins / "metrics.conf").write_text(text)
    result = subprocess.run([analyze, "verify", str(tmp_path / SERVICE.name)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "", result.stderr  # unknown keys are only warnings
