"""`gemsharectl doctor`'s checks: for this machine and this user, what would stop a program from
being shared, each as a Check (ok, warn or fail, what was found, how to fix it).

A failed check is one that stops sharing (no scheduler, a library that cannot load, no driver);
a warning is one that might (nothing preloads the library, this user may not change settings).
"""

from __future__ import annotations

import grp
import json
import os
import platform
import pwd
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from gemshare_nvs.config.settings import DEFAULT_CONTROL_GROUP
from gemshare_nvs.library import NAME as LIBRARY, LibraryMissing, library_path
from gemshare_nvs.service.permissions import FROM_A_POD_PREFIX, may_control
from gemshare_nvs.version import version
from gemshare_nvs.wire.connection import DEFAULT_SOCKET

from . import client
from .elf_needs import ElfProblem, machine_name, read_needs, version_text
from .errors import CtlError, ExitCode

OK, WARN, FAIL = "ok", "warn", "fail"
SYSTEM_PRELOAD = Path("/etc/ld.so.preload")
PROBE_TIMEOUT_S = 60.0  # a driver's first cuInit on a big machine takes seconds, not a minute
PRELOAD_HINT = "LD_PRELOAD=$(gemsharectl library-path) python train.py"
START_HINT = ("start it ('sudo systemctl start gemshare-scheduler', or 'sudo gemshare-scheduler'), "
              "or point --socket / GEMSHARE_SOCKET at the socket it listens on")
MIB = 1 << 20


@dataclass
class Check:
    name: str
    status: str
    what: str
    fix: str = ""

    def line(self) -> str:
        return f"{self.status:<4}  {self.name:<9}  {self.what}" + \
            (f"; fix: {self.fix}" if self.fix else "")


def failed(checks: list[Check]) -> bool:
    return any(check.status == FAIL for check in checks)


def as_json(checks: list[Check]) -> str:
    return json.dumps({"ok": not failed(checks), "checks": [asdict(c) for c in checks]},
                      indent=2)


def run_checks(socket: Path, timeout: float, pid: int | None = None,
               library: Path | None = None) -> list[Check]:
    checks, status = scheduler_checks(socket, timeout)
    in_a_pod = any(check.what.endswith(IN_A_POD) for check in checks)
    found, loads = library_checks(library)
    checks += loads
    checks += gpu_checks(gpu_probe())
    if status is not None:
        checks += mps_checks(status)
    checks += preload_checks(found)
    checks.append(Check("control", OK, "from inside a pod nobody may change settings: run "
                        "gemsharectl on the node") if in_a_pod else control_check(status, socket))
    if pid is not None:
        checks += program_checks(pid, status, socket)
    return checks


# ----- the scheduler ------------------------------------------------------------------------

def _uptime(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


IN_A_POD = ("from inside a pod it gives no status, only registration and the lock, so "
            "whether it knows a program is for 'gemsharectl status' on the node")


def scheduler_checks(socket: Path, timeout: float) -> tuple[list[Check], dict | None]:
    """Whether a scheduler answers on `socket`, and its version beside gemsharectl's; the
    status it gave (None when none answered)."""
    try:
        status = client.read_status(socket, timeout)
    except CtlError as error:
        if error.exit_code == ExitCode.PERMISSION and FROM_A_POD_PREFIX in error.message:
            # It answered: a pod's programs may register, never read status (security.md).
            return [Check("scheduler", OK, f"gemshare-scheduler answers on {socket}; "
                          f"{IN_A_POD}")], None
        if error.exit_code == ExitCode.PERMISSION:
            fix = "ask an administrator for access to the socket and its directory, or run as root"
        elif error.exit_code == ExitCode.INVALID:  # a socket path no socket can have
            fix = "give --socket or GEMSHARE_SOCKET the scheduler's socket"
        elif not os.path.lexists(socket):
            return [Check("scheduler", FAIL, f"no gemshare-scheduler: {socket} does not exist",
                          START_HINT)], None
        else:
            fix = START_HINT + "; its log says why it stopped (journalctl -u gemshare-scheduler)"
        return [Check("scheduler", FAIL, error.message, fix)], None
    theirs = status.get("version")
    mine = version()
    checks = [Check("scheduler", OK,
                    f"gemshare-scheduler {theirs or '(version not reported)'} answers on {socket} "
                    f"(pid {status.get('pid')}, up {_uptime(status.get('uptime_s') or 0)})")]
    if theirs is None:
        checks.append(Check("version", WARN, "the scheduler does not report its version: it is "
                            f"older than gemsharectl {mine}",
                            "restart the scheduler from this installation"))
    elif theirs != mine:
        checks.append(Check("version", WARN, f"the scheduler is {theirs}, gemsharectl {mine}",
                            "run both from one installation (restart the scheduler after an "
                            "upgrade)"))
    return checks, status


# ----- the library --------------------------------------------------------------------------

def this_glibc() -> tuple[int, ...] | None:
    """This machine's glibc version, None where the C library is another (musl)."""
    try:
        words = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        return None
    name, _, number = words.partition(" ")
    try:
        return tuple(int(part) for part in number.split(".")) if name == "glibc" else None
    except ValueError:
        return None


def library_checks(explicit: Path | None) -> tuple[Path | None, list[Check]]:
    """The library to preload (`explicit`, else this installation's) and whether it loads."""
    if explicit is None:
        try:
            explicit = library_path()
        except LibraryMissing as missing:
            return None, [Check("library", FAIL, f"no {LIBRARY} for this installation",
                                str(missing))]
    path = Path(os.path.abspath(explicit))
    return path, [loadable(path, "library")]


def loadable(path: Path, name: str) -> Check:
    """Whether a program on this machine can preload the library at `path`: its architecture
    and word size, the glibc versions it needs, then the dynamic loader's own verdict."""
    machine = machine_name(platform.machine())
    try:
        needs = read_needs(path)
    except ElfProblem as problem:
        return Check(name, FAIL, str(problem), f"use the {LIBRARY} of a gemshare wheel or build")
    if needs.machine != machine or needs.bits != 64:
        return Check(name, FAIL, f"{path} is built for {needs.machine} ({needs.bits}-bit), this "
                     f"machine is {machine}: programs here cannot load it",
                     f"use the {machine} library: the gemshare wheel for {machine} "
                     f"(manylinux_2_17_{machine}), or build/{machine}/{LIBRARY} of make")
    wanted = needs.newest_glibc()
    have = this_glibc()
    needed = f"glibc {version_text(wanted)}" if wanted else "no glibc version"
    if have is None:
        return Check(name, FAIL, f"{path} needs {needed}, and this machine's C library is not "
                     "glibc", "run programs on a glibc system or image (glibc 2.17 or newer)")
    if wanted and wanted > have:
        return Check(name, FAIL, f"{path} needs {needed}, this machine has glibc "
                     f"{version_text(have)}",
                     "use a library built for glibc 2.17: a gemshare wheel's, or make's "
                     "default build (not PORTABLE=0)")
    refused = _loader_refuses(path)
    if refused:
        return Check(name, FAIL, f"the dynamic loader refuses {path}: {refused}",
                     "install gemshare again, or rebuild the library (make)")
    return Check(name, OK, f"{path} loads here ({machine}, needs {needed}, this machine has "
                 f"glibc {version_text(have)})")


def _loader_refuses(path: Path) -> str | None:
    """What the dynamic loader says when a small program preloads `path`, or None when it
    loads without a word."""
    program = shutil.which("true") or sys.executable
    command = [program] if program != sys.executable else [program, "-c", ""]
    env = {**os.environ, "LD_PRELOAD": str(path)}
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=30,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"a test program could not run ({error})"
    lines = done.stderr.strip().splitlines()
    # Only its words about this library: a broken entry of /etc/ld.so.preload speaks in every
    # program, and is the preload check's to report.
    about = [line for line in lines if str(path) in line]
    if done.returncode != 0:
        return (about or lines or [f"exit status {done.returncode}"])[0]
    return about[0] if about else None


# ----- the driver and the GPUs --------------------------------------------------------------

def gpu_probe() -> dict:
    """gpu_probe.py's findings, from a child process without LD_PRELOAD."""
    env = {key: value for key, value in os.environ.items() if key != "LD_PRELOAD"}
    # This interpreter's import path: make install's launchers set theirs in the script, not
    # in the environment, and the child needs the package and pynvml from there.
    env["PYTHONPATH"] = os.pathsep.join(entry for entry in sys.path if entry)
    try:
        done = subprocess.run([sys.executable, "-m", "gemshare_ctl.gpu_probe"], env=env,
                              capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"failed": f"the driver did not answer within {PROBE_TIMEOUT_S:g} s"}
    try:
        return json.loads(done.stdout)
    except ValueError:
        how = f"signal {-done.returncode}" if done.returncode < 0 else \
            f"exit status {done.returncode}"
        last = (done.stderr.strip().splitlines() or [""])[-1]
        return {"failed": f"asking the driver crashed ({how}){': ' + last if last else ''}"}


def _cuda_version(number: int | None) -> str:
    return f"{number // 1000}.{number % 1000 // 10}" if number else "of unknown version"


def gpu_checks(probe: dict) -> list[Check]:
    if "failed" in probe:
        return [Check("driver", FAIL, probe["failed"], "check the driver with nvidia-smi")]
    driver, nvml = probe["driver"], probe["nvml"]
    checks = []
    if not driver["loaded"]:
        checks.append(Check("driver", FAIL, f"no NVIDIA driver: {driver['error']}",
                            "install the NVIDIA driver (in a container: run it with the NVIDIA "
                            "container toolkit, which mounts libcuda.so.1)"))
    elif driver["init_error"]:
        checks.append(Check("driver", FAIL, f"the CUDA driver does not start: cuInit gives "
                            f"{driver['init_error']}",
                            "check nvidia-smi, CUDA_VISIBLE_DEVICES and the driver's kernel "
                            "module (dmesg)"))
    else:
        devices = driver["devices"]
        without = [d for d in devices if d["managed_memory"] is not True]
        if not devices:
            checks.append(Check("driver", FAIL, "the CUDA driver lists no devices",
                                "check nvidia-smi and CUDA_VISIBLE_DEVICES"))
        elif without:
            names = ", ".join(f"{d['index']} ({d['name']})" for d in without)
            checks.append(Check("driver", FAIL, f"device {names} has no managed memory, into "
                                f"which {LIBRARY} turns allocations",
                                "give programs on it GEMSHARE_UNIFIED_MEMORY=0: they take turns "
                                "but may not allocate more than the card holds"))
        else:
            checks.append(Check("driver", OK, f"CUDA driver {_cuda_version(driver['version'])}, "
                                f"{len(devices)} device{'s' if len(devices) > 1 else ''} with "
                                "managed memory"))
    if nvml.get("error"):
        status = FAIL if not driver["loaded"] else WARN
        checks.append(Check("gpus", status, f"NVML does not answer ({nvml['error']}): the "
                            "scheduler cannot read the GPUs' names and memory",
                            "install the NVIDIA driver's NVML (libnvidia-ml.so.1); mode auto "
                            "then uses what programs report"))
    elif not nvml["gpus"]:
        checks.append(Check("gpus", FAIL, "NVML lists no GPUs", "check nvidia-smi"))
    else:
        checks.append(Check("gpus", OK, "; ".join(
            f"GPU {g['index']}: {g['name']}, {g['memory_total_bytes'] / (1 << 30):.0f} GiB"
            for g in nvml["gpus"])))
    return checks


# ----- MPS, preloading, control -------------------------------------------------------------

def mps_checks(status: dict) -> list[Check]:
    mps = status.get("mps") or {}
    if not mps.get("enabled"):
        return [Check("mps", OK, "not asked for (the scheduler runs without --mps)")]
    if mps.get("running"):
        return [Check("mps", OK, f"the MPS control daemon answers (pipe directory "
                      f"{mps.get('pipe_directory')})")]
    logs = mps.get("log_directory")
    return [Check("mps", FAIL, f"asked for, but the MPS control daemon does not run: "
                  f"{mps.get('problem') or 'no reason given'}",
                  "the scheduler starts nvidia-cuda-mps-control from its PATH (the NVIDIA "
                  "driver's utilities) and again if it dies; its log says why it stopped"
                  + (f" ({logs})" if logs else "") + "; meanwhile programs run as plain contexts")]


def _preload_entries() -> list[tuple[str, str]]:
    """(where, path) of every library named by /etc/ld.so.preload and this LD_PRELOAD."""
    found = []
    try:
        text = SYSTEM_PRELOAD.read_text(errors="replace")
    except OSError:
        text = ""
    found += [(str(SYSTEM_PRELOAD), word) for word in text.replace(":", " ").split()]
    found += [("LD_PRELOAD", word)
              for word in os.environ.get("LD_PRELOAD", "").replace(":", " ").split()]
    return found


def preload_checks(library: Path | None) -> list[Check]:
    named = [(where, path) for where, path in _preload_entries()
             if Path(path).name.startswith("libnvs")]
    if not named:
        return [Check("preload", WARN, f"neither {SYSTEM_PRELOAD} nor LD_PRELOAD names "
                      f"{LIBRARY}: only programs started with it preloaded are shared",
                      f"start each program so ({PRELOAD_HINT}), or list the library in "
                      f"{SYSTEM_PRELOAD} for every program")]
    checks = []
    for where, path in named:
        who = "every program on this machine" if where == str(SYSTEM_PRELOAD) else \
            "programs started from this environment"
        if not os.path.exists(path):
            checks.append(Check("preload", FAIL, f"{where} names {path}, which does not exist: "
                                f"{who} start without it (and the loader complains)",
                                "name the library's path there (gemsharectl library-path)"))
            continue
        found = loadable(Path(path), "preload")
        if found.status != OK:
            checks.append(Check("preload", FAIL, f"{where} names {path}: {found.what}",
                                found.fix))
        elif library is not None and Path(path).resolve() != library.resolve():
            checks.append(Check("preload", WARN, f"{where} names {path}, not this "
                                f"installation's {library}: {who} get that one",
                                "name this installation's library there, or check that the "
                                "other is from the same gemshare release"))
        else:
            checks.append(Check("preload", OK, f"{where} names {path}: {who} get it"))
    return checks


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def control_check(status: dict | None, socket: Path) -> Check:
    """Whether this user may change the scheduler's settings, by the scheduler's own rule:
    root, the user it runs as (the socket's owner) and its control group's members."""
    group = (status or {}).get("control_group") or DEFAULT_CONTROL_GROUP
    try:
        owner = os.stat(socket).st_uid
    except OSError:
        owner = 0
    uid = os.getuid()
    allowed, why = may_control(uid, os.getgid(), tuple(os.getgroups()), group, owner)
    me = f"this user ({_user(uid)})"
    if allowed:
        how = "is root" if uid == 0 else "runs the scheduler" if uid == owner else \
            f"is in group {group!r}"
        return Check("control", OK, f"{me} {how}: may change settings with gemsharectl")
    try:
        grp.getgrnam(group)
        fix = f"ask an administrator to run 'usermod -aG {group} {_user(uid)}', then log in again"
    except KeyError:
        fix = f"an administrator creates the group ('groupadd {group}') and adds users to it"
    return Check("control", WARN, f"{me} may read the status but not change settings: "
                 f"{why.removeprefix('permission denied: ')}", fix)


# ----- one program --------------------------------------------------------------------------

def _program_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def _mapped_library(pid: int) -> str | None:
    """The libnvs file mapped into process `pid`, None when there is none; OSError when its
    maps cannot be read."""
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            fields = line.split(None, 5)  # address perms offset dev inode [path]
            if len(fields) == 6 and Path(fields[5].strip()).name.startswith("libnvs"):
                return fields[5].strip()
    return None


def _socket_of(pid: int) -> str | None:
    """The GEMSHARE_SOCKET in process `pid`'s environment, "" when unset, None when unknown."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    for entry in raw.split(b"\0"):
        if entry.startswith(b"GEMSHARE_SOCKET="):
            return os.fsdecode(entry.split(b"=", 1)[1])
    return ""


def program_checks(pid: int, status: dict | None, socket: Path) -> list[Check]:
    if not os.path.exists(f"/proc/{pid}"):
        return [Check("program", FAIL, f"no process has pid {pid}",
                      "give the pid of a running program (ps, pgrep)")]
    who = f"process {pid} ({_program_name(pid)})"
    try:
        mapped = _mapped_library(pid)
    except OSError as error:
        return [Check("program", WARN, f"cannot read /proc/{pid}/maps: "
                      f"{error.strerror or error}", "run gemsharectl doctor as root, or as the "
                      "program's user")]
    checks = []
    if mapped is None:
        checks.append(Check("program", FAIL, f"{who} has no {LIBRARY} loaded",
                            f"restart it with the library preloaded ({PRELOAD_HINT}); a program "
                            f"keeps what it started with, {SYSTEM_PRELOAD} included"))
    else:
        checks.append(Check("program", OK, f"{who} has {mapped} loaded"))
    if status is None:
        return checks
    mine = [c for c in status.get("clients") or [] if c.get("pid") == pid]
    if mine:
        checks += [Check("client", OK, f"{who} is client {c['id']} of the scheduler (label "
                         f"{c.get('label') or '(none)'}, device {c.get('device')}, "
                         f"{c.get('state')}, {(c.get('allocated_bytes') or 0) / MIB:.0f} MiB "
                         f"allocated)") for c in mine]
    elif mapped is not None:
        theirs = _socket_of(pid)
        if theirs is not None and Path(theirs or DEFAULT_SOCKET) != socket:
            fix = (f"it talks to {theirs or DEFAULT_SOCKET} (its GEMSHARE_SOCKET): check that "
                   f"one with --socket, or restart it with GEMSHARE_SOCKET={socket}")
        else:
            fix = ("it registers when it first reaches for the CUDA driver, so a program that "
                   "has not used the GPU yet is not listed; in a container its pid here may "
                   "differ from the scheduler's view ('gemsharectl status' lists the pids)")
        checks.append(Check("client", FAIL, f"{who} is not registered with the scheduler on "
                            f"{socket}", fix))
    return checks
