"""The systemd units: systemd itself accepts them, they say what the scheduler relies on, and
`systemd-analyze security` finds the service sandboxed as the README says."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest
from installed_commands import COMMANDS

from gemshare_nvs.config.settings import (
    DEFAULT_MAX_CLIENTS,
    DEFAULT_MAX_CONTROL,
    DEFAULT_MAX_VIEW_ONLY,
    DEFAULT_STATE_DIR,
)
from gemshare_nvs.service.fd_limits import RESERVED
from gemshare_nvs.wire.connection import DEFAULT_SOCKET

REPO = Path(__file__).resolve().parents[2]
UNITS = REPO / "systemd"
SERVICE = UNITS / "gemshare-scheduler.service"
SOCKET = UNITS / "gemshare-scheduler.socket"


# Keys systemd takes one value of per line, adding up; any other key given twice in a section is
# an error here, as it would be a surprise there.
REPEATABLE = {"DeviceAllow"}


class Section(dict):
    """key -> its value (systemd's keys are case-sensitive); `all(key)` for a repeatable one."""

    def __init__(self) -> None:
        super().__init__()
        self._every: dict[str, list[str]] = {}

    def add(self, key: str, value: str) -> None:
        assert key not in self or key in REPEATABLE, f"{key} given twice"
        self[key] = value
        self._every.setdefault(key, []).append(value)

    def all(self, key: str) -> list[str]:
        return self._every.get(key, [])


def read_unit(path: Path) -> dict[str, Section]:
    sections: dict[str, Section] = {}
    section = None
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = sections.setdefault(line[1:-1], Section())
        else:
            key, equals, value = line.partition("=")
            assert section is not None and equals, f"{path}: {line!r} is not key=value"
            section.add(key.strip(), value.strip())
    return sections


def test_service_runs_the_installed_scheduler_as_a_notify_service():
    service = read_unit(SERVICE)["Service"]
    command = PurePosixPath(service["ExecStart"].split()[0])
    assert command.is_absolute()
    assert command.name == "gemshare-scheduler" and command.name in COMMANDS
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


def drop_in_values(drop_in: Path, key: str) -> list[str]:
    """Every value a drop-in gives `key`, in order (a drop-in may assign a key more than once)."""
    return [line.split("=", 1)[1] for line in drop_in.read_text().splitlines()
            if line.startswith(f"{key}=")]


def installed_with_drop_in(directory: Path, drop_in: Path) -> Path:
    """The service, with the drop-in as `<name>.conf` beside it, in `directory` as
    units_to_verify leaves them (skips without systemd-analyze); checked by `verify` and
    returned, for `systemd-analyze security`."""
    analyze, pointed = units_to_verify(directory)
    drop_ins = directory / f"{SERVICE.name}.d"
    drop_ins.mkdir()
    text = pointed(drop_in.read_text())
    assert f"ExecStart={Path(sys.executable).with_name('gemshare-scheduler')} " in text
    (drop_ins / drop_in.name.removesuffix(".example")).write_text(text)
    verified(analyze, directory / SERVICE.name)
    return directory / SERVICE.name


def test_systemd_analyze_verify_accepts_both_units(tmp_path):
    analyze, _ = units_to_verify(tmp_path)
    verified(analyze, tmp_path / SERVICE.name, tmp_path / SOCKET.name)


def test_service_has_a_watchdog_and_room_for_every_connection():
    service = read_unit(SERVICE)["Service"]
    assert service["WatchdogSec"] == "30s"  # the scheduler pings every WatchdogSec/2
    # Enough descriptors that the defaults are never clamped (RESERVED for everything else).
    assert int(service["LimitNOFILE"]) >= DEFAULT_MAX_CLIENTS + DEFAULT_MAX_CONTROL + \
        DEFAULT_MAX_VIEW_ONLY + RESERVED


# What NVML opens: /dev/nvidiactl and /dev/nvidiaN (the nvidia-frontend driver's nodes),
# /dev/nvidia-uvm (nvidia-uvm), and on a MIG GPU the capability nodes (nvidia-caps), read-only.
GPU_DEVICES = {"char-nvidia-frontend rw", "char-nvidia-uvm rw", "char-nvidia-caps r"}


def test_service_runs_as_a_user_of_its_own_with_no_capability():
    service = read_unit(SERVICE)["Service"]
    assert service["DynamicUser"] == "yes"
    assert service.get("User", "root") not in ("root", "0")
    assert service["CapabilityBoundingSet"] == "" and service["AmbientCapabilities"] == ""
    assert service["NoNewPrivileges"] == "yes"
    # Peers' uids must stay theirs: config rules and the control group read them.
    assert service.get("PrivateUsers", "no") == "no"


def test_service_sees_the_gpu_device_nodes_and_no_other_hardware():
    service = read_unit(SERVICE)["Service"]
    assert service["DevicePolicy"] == "closed"
    assert set(service.all("DeviceAllow")) == GPU_DEVICES


def test_service_has_no_network_until_the_metrics_drop_in_gives_it_one():
    service = read_unit(SERVICE)["Service"]
    assert service["PrivateNetwork"] == "yes"
    assert service["RestrictAddressFamilies"] == "AF_UNIX"
    drop_in = (UNITS / "gemshare-scheduler.service.d" / "metrics.conf.example").read_text()
    assert [line for line in drop_in.splitlines() if line.startswith("PrivateNetwork=")] == \
        ["PrivateNetwork=no"]


def test_the_readme_says_what_the_unit_does():
    readme = (REPO / "README.md").read_text()
    under_systemd = readme.split("## Running under systemd", 1)[1].split("\n## ", 1)[0]
    for words in ("`DynamicUser=yes`", "no capabilities", "`PrivateNetwork=yes`",
                  *(f"`{device.split()[0]}`" for device in GPU_DEVICES)):
        assert words in under_systemd, words


def security_review(analyze: str, unit: Path) -> tuple[float, dict]:
    """(overall exposure, each check by name) from `systemd-analyze security` on the unit file."""
    def run(*options: str) -> str:
        result = subprocess.run([analyze, "security", "--offline=true", *options, str(unit)],
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        return result.stdout
    overall = re.search(r"Overall exposure level for \S+: ([\d.]+)", run())
    assert overall, "systemd-analyze printed no overall exposure"
    checks = {check["name"]: check for check in json.loads(run("--json=short"))}
    return float(overall[1]), checks


def test_systemd_analyze_security_rates_the_service_as_sandboxed(tmp_path):
    analyze, _ = units_to_verify(tmp_path)
    exposure, checks = security_review(analyze, tmp_path / SERVICE.name)
    # 10 is a service with no sandboxing, 2.3 as it was as root with the network (1.0 now); what is
    # left is explained in the unit (device ACL, system call groups, PrivateUsers and the like).
    assert exposure <= 1.5, exposure
    for name in ("User=/DynamicUser=", "PrivateNetwork=", "NoNewPrivileges=", "ProtectSystem=",
                 "CapabilityBoundingSet=~CAP_SYS_ADMIN",
                 "CapabilityBoundingSet=~CAP_(DAC_*|FOWNER|IPC_OWNER)",
                 "CapabilityBoundingSet=~CAP_(CHOWN|FSETID|SETFCAP)",
                 "RestrictAddressFamilies=~AF_(INET|INET6)", "PrivateTmp="):
        assert checks[name]["set"], (name, checks[name]["description"])
    device_acl = checks["DeviceAllow="]["description"]
    for device in GPU_DEVICES:
        assert device.replace(" ", ":") in device_acl, device_acl
