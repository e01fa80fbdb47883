"""A memory cgroup of a run's own, below the one the caller runs in: a limit, its peak use, how many
of its processes the OOM killer took, and a command line that starts a program inside it.
cgroup v1 (memory.limit_in_bytes) and v2 (memory.max) alike; `create` says why it cannot be made
(no memory controller, no permission), for a test to skip or a bench part to say. Used by the
bench part memory_limit and by tests/libnvs/test_staging_host_memory.py."""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

V1_ROOT = Path("/sys/fs/cgroup/memory")
V2_ROOT = Path("/sys/fs/cgroup")


class MemoryCgroup:
    def __init__(self, path: Path, v2: bool):
        self.path = path
        self.v2 = v2

    def _file(self, v1_name: str, v2_name: str) -> Path:
        return self.path / (v2_name if self.v2 else v1_name)

    def limit(self, size: int) -> None:
        self._file("memory.limit_in_bytes", "memory.max").write_text(str(size))

    def peak(self) -> int:
        """The most its processes used at once (anonymous memory and page cache)."""
        return int(self._file("memory.max_usage_in_bytes", "memory.peak").read_text())

    def used(self) -> int:
        """What its processes use now, as libnvs counts it: inactive file pages, which the kernel
        drops before it kills anything, left out."""
        usage = int(self._file("memory.usage_in_bytes", "memory.current").read_text())
        key = "inactive_file" if self.v2 else "total_inactive_file"
        for line in (self.path / "memory.stat").read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return usage - int(value)
        return usage

    def oom_kills(self) -> int:
        text = self._file("memory.oom_control", "memory.events").read_text()
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def wrap(self, command: list[str]) -> list[str]:
        """`command`, started inside the group (the shell joins it, then becomes the program: the
        pid stays the program's)."""
        return ["/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(self.path),
                *command]

    def remove(self) -> None:
        """The group goes, and with it what is left of the programs the test started in it
        (a test that failed half way)."""
        for pid in (self.path / "cgroup.procs").read_text().split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while True:
            try:
                self.path.rmdir()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


def own_group(v2: bool) -> Path | None:
    """The directory of the memory cgroup this process is in."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if (v2 and controllers == "") or (not v2 and "memory" in controllers.split(",")):
            root = V2_ROOT if v2 else V1_ROOT
            inside = root / path.lstrip("/")
            return inside if inside.is_dir() else root
    return None


def create() -> tuple[MemoryCgroup | None, str]:
    """A new memory cgroup below this process's own, or None and why there is none."""
    v2 = not V1_ROOT.is_dir() and (V2_ROOT / "cgroup.controllers").is_file()
    if not v2 and not V1_ROOT.is_dir():
        return None, "no memory cgroup hierarchy is mounted"
    parent = own_group(v2)
    if parent is None:
        return None, "this process is in no memory cgroup"
    if v2:  # the nearest group that hands the memory controller down (root may use any)
        own = parent
        while "memory" not in (parent / "cgroup.subtree_control").read_text().split():
            if parent == V2_ROOT:
                return None, f"cgroup v2 {own} does not hand the memory controller to its children"
            parent = parent.parent
    path = parent / f"gemshare-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        path.mkdir()
    except OSError as error:
        return None, f"cannot create a memory cgroup under {parent}: {error.strerror}"
    group = MemoryCgroup(path, v2)
    try:
        group.limit(1 << 40)
        group.peak()
    except OSError as error:
        group.remove()
        return None, f"cannot use memory cgroup {path}: {error.strerror}"
    return group, ""
