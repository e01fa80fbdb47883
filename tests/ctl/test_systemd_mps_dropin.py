"""The drop-in that runs the scheduler with --mps: as root with only the capabilities the MPS
control daemon needs, /proc and a umask that let it serve every user, /dev/shm left the host's,
and systemd accepts it with the unit and applies it as written."""

from __future__ import annotations

import shutil

from test_systemd_units import (
    SERVICE,
    UNITS,
    drop_in_values,
    installed_with_drop_in,
    read_unit,
    security_review,
)

from gemshare_nvs.protocol import Mode
from gemshare_nvs.service.command_line import parse

DROP_IN = UNITS / "gemshare-scheduler.service.d" / "mps.conf.example"
# Become each user, stop other users' servers, reach their servers' files.
MPS_CAPABILITIES = {"CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_CHOWN", "CAP_FOWNER",
                    "CAP_DAC_OVERRIDE"}


def only(key: str) -> str:
    (value,) = drop_in_values(DROP_IN, key)
    return value


def test_the_drop_in_runs_the_scheduler_with_mps_as_root():
    commands = drop_in_values(DROP_IN, "ExecStart")
    assert commands[0] == ""  # else systemd would keep the unit's command beside this one
    program, *options = commands[-1].split()
    assert program == read_unit(SERVICE)["Service"]["ExecStart"].split()[0]
    assert "--mps" in options and parse(options).mps
    # In `on` nobody would go through MPS.
    assert parse(options).mode == Mode.AUTO and "anti_thrash" in parse(options).given
    assert (only("DynamicUser"), only("User")) == ("no", "root")


def test_root_keeps_only_the_capabilities_the_control_daemon_needs():
    assert read_unit(SERVICE)["Service"]["CapabilityBoundingSet"] == ""  # the unit's: none
    assert set(only("CapabilityBoundingSet").split()) == MPS_CAPABILITIES
    assert drop_in_values(DROP_IN, "AmbientCapabilities") == []  # root has them already
    assert drop_in_values(DROP_IN, "NoNewPrivileges") == []  # stays yes: setuid() needs no exec


def test_every_users_programs_can_reach_the_daemon():
    assert read_unit(SERVICE)["Service"]["ProtectProc"] == "invisible"
    assert only("ProtectProc") == "default"
    assert read_unit(SERVICE)["Service"]["UMask"] == "0027"
    assert only("UMask") == "0022"


def test_dev_shm_stays_the_hosts():
    unit = read_unit(SERVICE)["Service"]

    def given(key: str) -> list[str]:
        return [unit.get(key, ""), *drop_in_values(DROP_IN, key)]
    assert set(given("PrivateIPC")) <= {"", "no"}
    assert set(given("PrivateDevices")) <= {"", "no"}
    for key in ("TemporaryFileSystem", "InaccessiblePaths", "BindPaths", "BindReadOnlyPaths"):
        assert not any("/dev/shm" in value for value in given(key)), key


def test_systemd_reads_the_unit_with_the_drop_in_as_written(tmp_path):
    installed = installed_with_drop_in(tmp_path, DROP_IN)
    conf = installed.with_name(f"{SERVICE.name}.d") / "mps.conf"
    assert " --mps\n" in conf.read_text()
    exposure, checks = security_review(shutil.which("systemd-analyze"), installed)
    assert not checks["User=/DynamicUser="]["set"]  # root now
    assert checks["CapabilityBoundingSet=~CAP_SYS_ADMIN"]["set"]
    assert not checks["CapabilityBoundingSet=~CAP_SET(UID|GID|PCAP)"]["set"]
    assert not checks["ProtectProc="]["set"]
    assert checks["PrivateNetwork="]["set"]  # the rest of the sandbox holds
    assert exposure <= 2.5, exposure
