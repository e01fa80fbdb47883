"""`gemshare-device-plugin`: the command line, logging and signals around lifecycle.Plugin.

On Typer, as the scheduler's (typer_command.py): the same plain help and errors, exit status 2
for a bad command line, and completion. What runs the plugin needs the kubelet's gRPC and
protobuf (the extra `gemshare[kubernetes]`), imported only once the command line is read: help,
--version and a bad command line work without them, and a run without them says in one line
what to install.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import typer

from gemshare_nvs.config.settings import Size, debug_from_environment
from gemshare_nvs.kubernetes.grpc_calls import GrpcMissing, require_grpc
from gemshare_nvs.observe.tcp_address import AddressError, bind
from gemshare_nvs.service import journal, typer_command
from gemshare_nvs.service.mps import directories_beside
from gemshare_nvs.wire.connection import DEFAULT_SOCKET, socket_path

from . import resource_names
from .allocation import CONTAINER_LIBRARY, SHARED_MEMORY_DIR, Paths
from .resources import COMPUTE_SUFFIX, MEMORY_SUFFIX, family, family_names, size_words

PROG = "gemshare-device-plugin"
DEFAULT_SOCKET_DIR = "/var/lib/kubelet/device-plugins"
# Where the image's init container puts the library on the node (deploy/); a node set up with
# `make install` has it elsewhere, which --library names.
DEFAULT_LIBRARY = "/usr/local/lib/gemshare/libnvs.so"
DEFAULT_RESOURCE = "gemshare.io/gpu"
DEFAULT_SLOTS = 10
MAX_SLOTS = 1000
MIB = 1 << 20
DEFAULT_MEMORY_UNIT = "1GiB"
# Units so small that a GPU has thousands would crowd the kubelet's lists (devices.py caps them);
# a unit larger than any GPU makes none.
MEMORY_UNIT = Size("--memory-unit", 64 * MIB, 1 << 40)
MAX_MEMORY_OVERCOMMIT = 10

log = logging.getLogger(PROG)


@dataclass(frozen=True)
class Options:
    kubelet_socket_dir: str
    slots: int
    resource_name: str
    memory_unit: int  # bytes
    memory_overcommit: float
    scheduler_socket: str
    library: str
    mps_pipe_directory: Optional[str]  # None: the scheduler does not run MPS
    health: Optional[tuple[str, int]]
    debug: bool


def _slot_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_SLOTS:
        raise typer.BadParameter(f"{text!r} is not a whole number of slots from 1 to {MAX_SLOTS}")
    return value


def _resource_name(text: str) -> str:
    for name in family_names(text):  # the memory and compute resources are named after it
        refused = resource_names.refusal(name)
        if refused is not None:
            raise typer.BadParameter(refused if name == text else
                                     f"the memory and compute resources are named after it: "
                                     f"{refused}")
    return text


def _memory_unit(text: str) -> int:
    try:
        size = MEMORY_UNIT.check(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if size % MIB:
        raise typer.BadParameter(f"--memory-unit must be a whole number of MiB (the units' "
                                 f"device IDs name it in MiB), not {text!r}")
    return size


def _memory_overcommit(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 1 <= value <= MAX_MEMORY_OVERCOMMIT:  # NaN too
        raise typer.BadParameter(f"--memory-overcommit must be a number from 1 to "
                                 f"{MAX_MEMORY_OVERCOMMIT}, such as 1.5, not {text!r}")
    return value


def _absolute_path(text: Optional[str]) -> Optional[str]:
    if text is not None and not text.startswith("/"):
        raise typer.BadParameter(f"{text!r} is not an absolute path")
    return None if text is None else os.path.normpath(text)


app = typer_command.plain_app(PROG)


@app.command(help="Kubernetes device plugin: advertises three resources to the kubelet, each "
                  "its own registration: NAME slots (--slots per GPU), NAME-memory units "
                  "(--memory-unit each, as many per GPU as its memory holds times "
                  "--memory-overcommit) and NAME-compute units (100 per GPU). A container that "
                  "gets any of them gets libnvs.so, the scheduler's socket and the GPU its "
                  "units are on; its memory and compute units become its budget there.")
def plugin(
    ctx: typer.Context,
    kubelet_socket_dir: str = typer.Option(
        DEFAULT_SOCKET_DIR, "--kubelet-socket-dir", metavar="DIR", show_default=False,
        callback=_absolute_path,
        help=f"the kubelet's device-plugin directory, which holds kubelet.sock (default "
             f"{DEFAULT_SOCKET_DIR})"),
    slots: str = typer.Option(
        str(DEFAULT_SLOTS), "--slots", metavar="N", show_default=False, callback=_slot_count,
        help=f"slots advertised per GPU: how many containers may share one, 1-{MAX_SLOTS} "
             f"(default {DEFAULT_SLOTS})"),
    resource_name: str = typer.Option(
        DEFAULT_RESOURCE, "--resource-name", metavar="NAME", show_default=False,
        callback=_resource_name,
        help=f"the slots' extended resource: DOMAIN/NAME, the domain outside kubernetes.io; "
             f"the memory and compute resources are NAME{MEMORY_SUFFIX} and NAME{COMPUTE_SUFFIX} "
             f"(default {DEFAULT_RESOURCE})"),
    memory_unit: str = typer.Option(
        DEFAULT_MEMORY_UNIT, "--memory-unit", metavar="SIZE", show_default=False,
        callback=_memory_unit,
        help=f"the size of one NAME{MEMORY_SUFFIX} unit, a whole number of MiB from "
             f"{size_words(MEMORY_UNIT.low)} to {size_words(MEMORY_UNIT.high)}, such as 1GiB, "
             f"512MiB or 1.5G (default {DEFAULT_MEMORY_UNIT})"),
    memory_overcommit: str = typer.Option(
        "1", "--memory-overcommit", metavar="X", show_default=False,
        callback=_memory_overcommit,
        help=f"advertise X times each GPU's memory in units, 1 to {MAX_MEMORY_OVERCOMMIT}: above "
             f"1 the containers' budgets together exceed the GPU, and Unified Memory moves what "
             f"does not fit to the host and back (default 1)"),
    scheduler_socket: Optional[str] = typer.Option(
        None, "--scheduler-socket", metavar="PATH", callback=_absolute_path,
        help=f"the scheduler's socket on the host (default $GEMSHARE_SOCKET, else "
             f"{DEFAULT_SOCKET})"),
    library: str = typer.Option(
        DEFAULT_LIBRARY, "--library", metavar="PATH", show_default=False,
        callback=_absolute_path,
        help=f"libnvs.so on the host, mounted into containers at {CONTAINER_LIBRARY} (default "
             f"{DEFAULT_LIBRARY})"),
    mps: bool = typer.Option(
        False, "--mps", show_default=False,
        help="the node's scheduler runs with --mps: give containers what MPS clients need, the "
             f"control daemon's pipe directory and the host's {SHARED_MEMORY_DIR} (default: off)"),
    mps_pipe_directory: Optional[str] = typer.Option(
        None, "--mps-pipe-directory", metavar="DIR", callback=typer_command.pipe_directory,
        help="with --mps, the control daemon's pipe directory on the host, as the scheduler's "
             "own option names it (default: mps/pipe beside the scheduler's socket, where the "
             "scheduler starts its own; implies --mps)"),
    health: Optional[str] = typer.Option(
        None, "--health", metavar="ADDR:PORT", callback=typer_command.tcp_address,
        help="answer Kubernetes probes over HTTP: /healthz while the plugin's loop runs, "
             "/readyz while every resource is registered with the kubelet (default: off)"),
    debug: bool = typer_command.debug_flag(),
    show_version: bool = typer_command.version_flag(PROG),
) -> None:
    scheduler = scheduler_socket or str(socket_path())
    if not scheduler.startswith("/"):
        raise typer.BadParameter(f"GEMSHARE_SOCKET={scheduler!r} is not an absolute path; give "
                                 "--scheduler-socket PATH", param_hint="'--scheduler-socket'")
    scheduler = os.path.normpath(scheduler)
    if mps_pipe_directory is not None:
        mps_pipe_directory = os.path.normpath(mps_pipe_directory)
    elif mps:  # where the scheduler starts its own daemon
        mps_pipe_directory = str(directories_beside(Path(scheduler))[0])
    ctx.obj.append(Options(kubelet_socket_dir=kubelet_socket_dir, slots=slots,
                           resource_name=resource_name, memory_unit=memory_unit,
                           memory_overcommit=memory_overcommit, scheduler_socket=scheduler,
                           library=library, mps_pipe_directory=mps_pipe_directory,
                           health=health,
                           debug=debug or debug_from_environment()))


def option_names() -> set[str]:
    """Every long option the plugin takes, --help aside."""
    return typer_command.option_names(app)


def parse(argv: Sequence[str]) -> Options:
    """The options a command line gives, for checking one (typer_command.parse)."""
    return typer_command.parse(app, PROG, argv)


def read(argv: Optional[Sequence[str]] = None) -> Options:
    """The options this process's command line gives, else the process ends here."""
    return typer_command.read(app, PROG, argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    options = read(argv)
    try:
        require_grpc("the device plugin")
    except GrpcMissing as missing:
        print(f"{PROG}: {missing}", file=sys.stderr)
        return 1
    from .health import serve_until_stopped
    from .lifecycle import Plugin

    # The scheduler's format, journal priorities included (journal.py).
    logging.basicConfig(level=logging.DEBUG if options.debug else logging.INFO,
                        handlers=[journal.stderr_handler()])
    try:
        # Bound before anything starts, so that a taken or foreign address stops the start.
        health_socket = bind(*options.health, "probes", "--health") if options.health else None
    except AddressError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    paths = Paths(library=options.library, scheduler_socket=options.scheduler_socket,
                  mps_pipe_directory=options.mps_pipe_directory)
    if not os.path.exists(options.library):
        log.warning("%s is not visible here; containers mount it from that path on the host, "
                    "so it must exist there (--library names another)", options.library)
    if options.mps_pipe_directory is not None:
        log.info("MPS: containers get the control daemon's pipe directory %s and the host's %s",
                 options.mps_pipe_directory, SHARED_MEMORY_DIR)
    plugin = Plugin(options.kubelet_socket_dir,
                    family(options.resource_name, options.slots, options.memory_unit,
                           options.memory_overcommit), paths)
    return serve_until_stopped(plugin, health_socket, log)


if __name__ == "__main__":
    sys.exit(main())
