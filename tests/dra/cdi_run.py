"""Run a program as a container runtime runs one given a CDI device: its mounts bound over the
container paths, its environment variables set over the program's own. For the DRA driver's end
to end test, as root, inside `unshare --mount --propagation private` (nothing reaches the host).

    cdi_run.py SPEC DEVICE SCRATCH PROC CGROUP -- PROGRAM ARG...

SCRATCH is an empty directory for the overlays that make room for container paths the host
lacks (/etc/ld.so.preload, /usr/local/lib/gemshare); PROC/<pid>/cgroup is written with CGROUP
first, so that a scheduler reading that /proc finds this process in its container.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True)


def make_room(target: Path, is_dir: bool, scratch: Path, overlays: list[Path]) -> None:
    """Make `target` exist, through an overlay on its nearest existing folder when it does not."""
    if target.exists():
        return
    ancestor = target.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if ancestor not in overlays:
        layer = scratch / str(len(overlays))
        (layer / "upper").mkdir(parents=True)
        (layer / "work").mkdir()
        mount("-t", "overlay", "overlay", "-o",
              f"lowerdir={ancestor},upperdir={layer / 'upper'},workdir={layer / 'work'}",
              str(ancestor))
        overlays.append(ancestor)
    if is_dir:
        target.mkdir(parents=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.touch()


def main(argv: list[str]) -> None:
    spec_path, device_name, scratch, proc, cgroup, separator, *program = argv
    assert separator == "--" and program, __doc__
    (Path(proc) / str(os.getpid())).mkdir(parents=True, exist_ok=True)
    (Path(proc) / str(os.getpid()) / "cgroup").write_text(f"0::{cgroup}\n")
    spec = json.loads(Path(spec_path).read_text())
    (device,) = [one for one in spec["devices"] if one["name"] == device_name]
    edits = device["containerEdits"]
    mount("-t", "tmpfs", "tmpfs", scratch)
    overlays: list[Path] = []
    for bind in edits.get("mounts", []):
        target = Path(bind["containerPath"]).resolve()
        make_room(target, os.path.isdir(bind["hostPath"]), Path(scratch), overlays)
        mount("--bind", bind["hostPath"], str(target))
        if "ro" in bind.get("options", []):
            mount("-o", "remount,bind,ro", str(target))
    env = dict(os.environ)
    env.update(variable.split("=", 1) for variable in edits.get("env", []))
    os.execvpe(program[0], program, env)


if __name__ == "__main__":
    main(sys.argv[1:])
