"""The other architecture's libnvs.so (aarch64 on an x86_64 machine) works: under qemu-user, a
stand-in program and fake driver of that architecture, with the library preloaded, register with
the real scheduler and take turns on its lock.

Needs Debian's qemu-user and that architecture's glibc for qemu to load programs with
(libc6-arm64-cross: /usr/aarch64-linux-gnu); without them the test skips and says so.
"""

from __future__ import annotations

import platform
import shutil
from pathlib import Path

import pytest
from elf_versions import MACHINES

import libnvs_programs
from libnvs_programs import BUILD, NO_EARLY_RELEASE, grants, wait_file, wait_for_client

OTHER = next(iter(sorted(set(MACHINES) - {platform.machine()})), None)
# Debian's packages of each architecture's glibc for cross use, and where they put it.
CROSS_GLIBC = {"aarch64": "libc6-arm64-cross", "x86_64": "libc6-amd64-cross"}


@pytest.fixture(scope="module")
def cross(built):
    """(qemu-user for the other architecture, its glibc's root, its build folder)."""
    if OTHER is None:
        pytest.skip(f"libnvs.so is built for {sorted(MACHINES)}; this machine is "
                    f"{platform.machine()}")
    qemu = shutil.which(f"qemu-{OTHER}")
    sysroot = Path(f"/usr/{OTHER}-linux-gnu")
    if qemu is None or not (sysroot / "lib" / "libc.so.6").exists():
        pytest.skip(f"running {OTHER} programs here needs qemu-{OTHER} and {OTHER}'s glibc "
                    f"(Debian: apt-get install qemu-user {CROSS_GLIBC[OTHER]})")
    libnvs_programs.make("libs", "fakecuda-cross")
    return qemu, sysroot, BUILD / OTHER


def cross_command(cross, steps: list) -> list[str]:
    """The stand-in of the other architecture under qemu, preloading that architecture's
    library: qemu hands these variables to the program only, not to its own loader."""
    qemu, sysroot, build = cross
    guest = {"LD_PRELOAD": build / "libnvs.so", "LD_LIBRARY_PATH": build / "fakecuda"}
    settings = [word for name, value in guest.items() for word in ("-E", f"{name}={value}")]
    return [qemu, "-L", str(sysroot), *settings, str(build / "fakecuda" / "standin"),
            *map(str, steps)]


def test_programs_of_the_other_architecture_take_turns_on_the_lock(cross, gpu_with):
    gpu, scheduler = gpu_with()

    def start(steps: list, env: dict | None = None):
        return gpu.start([], command=cross_command(cross, steps), preload=False, env=env)

    holder = start(["init", "launch", 100, "sync", "touch-file", gpu.path("held"),
                    "wait-file", gpu.path("never")], env=NO_EARLY_RELEASE)
    wait_file(gpu.path("held"))
    wait_for_client(gpu.socket, holder.pid, state="holding")
    waiter = start(["init", "alloc", "a", "1M", "launch", 100, "sync", "attr", "a"])
    wait_for_client(gpu.socket, waiter.pid, state="waiting")
    holder.kill()
    result = waiter.wait()
    assert result.returncode == 0, result.describe()
    assert result.ok("attr")["is_managed"] == "1"  # the library converted the allocation
    log = scheduler.log()
    assert grants(log, holder.pid) == 1 and grants(log, waiter.pid) == 1, log
