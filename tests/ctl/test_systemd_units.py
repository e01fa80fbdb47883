"""The systemd units: systemd itself accepts them, and they say what the scheduler relies on."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest

from gemshare_nvs.config.settings import DEFAULT_MAX_CLIENTS, DEFAULT_MAX_CONTROL, DEFAULT_STATE_DIR
from gemshare_nvs.service.fd_limits import RESERVED
from gemshare_nvs.wire.connection import DEFAULT_SOCKET

REPO = Path(__file__).resolve().parents[2]
UNITS = REPO / "systemd"
SERVICE = UNITS / "gemshare-scheduler.service"
SOCKET = UNITS / "gemshare-scheduler.socket"


def read_unit(path: Path) -> configparser.ConfigParser:
    # strict: a key given twice in one section is an error here, as it would be a surprise there.
    unit = configparser.ConfigParser(strict=True, interpolation=None, delimiters=("=",))
    unit.optionxform = str  # systemd keys are case-sensitive
    unit.read_string(path.read_text())
    return unit


def console_scripts() -> dict:
    tomllib = pytest.importorskip("tomllib")
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]


def test_service_runs_the_installed_scheduler_as_a_notify_service():
    service = read_unit(SERVICE)["Service"]
    command = PurePosixPath(service["ExecStart"].split()[0])
    assert command.is_absolute()
    assert command.name == "gemshare-scheduler" and command.name in console_scripts()
    assert service["Type"] == "notify"
    assert service["Restart"] == "on-failure"
    assert service["RuntimeDirectory"] == "gemshare"
    assert service["RuntimeDirectoryPreserve"] == "yes"  # else a restart deletes the socket
    assert "AF_UNIX" in service["RestrictAddressFamilies"].split()
    assert service.get("PrivateDevices", "no") == "no"  # NVML needs /dev/nvidia*


def test_service_reloads_by_sighup_and_keeps_state_where_the_scheduler_looks():
    service = read_unit(SERVICE)["Service"]
    assert service["ExecReload"].split() == ["/bin/kill", "-HUP", "$MAINPID"]
    # The one writable place ProtectSystem=strict leaves is the default --state-dir.
    assert f"/var/lib/{service['StateDirectory']}" == DEFAULT_STATE_DIR
    assert service["ProtectSystem"] == "strict"


def test_socket_unit_listens_where_every_part_looks():
    socket = read_unit(SOCKET)["Socket"]
    # /var/run is a symlink to /run on systemd hosts; systemd wants the /run spelling.
    assert socket["ListenStream"] == DEFAULT_SOCKET.replace("/var/run/", "/run/", 1)
    assert socket["SocketMode"] == "0666"
    assert SOCKET.stem == SERVICE.stem  # so the socket activates this service by default


def units_to_verify(directory: Path):
    """The units copied into `directory` as `systemd-analyze verify` wants them: ExecStart
    pointed at the scheduler installed for these tests (verify insists that it exists). Returns
    systemd-analyze and a function that points any unit text the same way; skips without them."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    scheduler = Path(sys.executable).with_name("gemshare-scheduler")
    if not scheduler.exists():
        pytest.skip(f"{scheduler} is not installed")
    installed = read_unit(SERVICE)["Service"]["ExecStart"]

    def pointed(text: str) -> str:
        return text.replace(f"ExecStart={installed}", f"ExecStart={scheduler}")
    service = pointed(SERVICE.read_text())
    assert str(scheduler) in service
    (directory / SERVICE.name).write_text(service)
    shutil.copy(SOCKET, directory / SOCKET.name)
    return analyze, pointed


def verified(analyze: str, *units: Path) -> None:
    result = subprocess.run([analyze, "verify", *map(str, units)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    # Unknown keys and unparsable values are only warnings, with status 0.
    assert result.stderr.strip() == "", result.stderr


def test_systemd_analyze_verify_accepts_both_units(tmp_path):
    analyze, _ = units_to_verify(tmp_path)
    verified(analyze, tmp_path / SERVICE.name, tmp_path / SOCKET.name)


def test_service_has_a_watchdog_and_room_for_every_connection():
    service = read_unit(SERVICE)["Service"]
    assert service["WatchdogSec"] == "30s"  # the scheduler pings every WatchdogSec/2
    # Enough descriptors that the defaults are never clamped (RESERVED for everything else).
    assert int(service["LimitNOFILE"]) >= DEFAULT_MAX_CLIENTS + DEFAULT_MAX_CONTROL + RESERVED
