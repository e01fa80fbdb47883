"""`gemshare-dra-plugin`: the command line, logging and signals around driver.Driver.

On Typer, as the device plugin's: plain help and errors, exit status 2 for a bad command line.
What runs the driver needs gRPC, protobuf and the Kubernetes client (the extra `gemshare[dra]`),
imported only once the command line is read: --help, --version and a bad command line work
without them, and a run without them says in one line what to install.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import sys
from dataclasses import dataclass
from typing import Optional, Sequence

import typer

from gemshare_nvs.config.settings import debug_from_environment
from gemshare_nvs.kubernetes.claim_devices import DRIVER
from gemshare_nvs.observe.tcp_address import AddressError, bind
from gemshare_nvs.service import journal, typer_command
from gemshare_nvs.wire.connection import DEFAULT_SOCKET, socket_path
from gemshare_plugin.cli import (
    DEFAULT_LIBRARY,
    DEFAULT_MEMORY_UNIT,
    MAX_MEMORY_OVERCOMMIT,
    _absolute_path,
    _memory_overcommit,
    _memory_unit,
)

from .api_server import INSTALL

PROG = "gemshare-dra-plugin"
DEFAULT_PLUGINS_DIR = "/var/lib/kubelet/plugins"
DEFAULT_REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"
DEFAULT_CDI_DIR = "/var/run/cdi"

# A node's name is a DNS subdomain (RFC 1123), as the API server checks it.
NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

log = logging.getLogger(PROG)


@dataclass(frozen=True)
class Options:
    kubeconfig: Optional[str]
    node_name: str
    kubelet_plugins_dir: str
    kubelet_registry_dir: str
    cdi_dir: str
    memory_unit: int
    memory_overcommit: float
    scheduler_socket: str
    library: str
    poll_s: float
    health: Optional[tuple[str, int]]
    debug: bool


def _node_name(text: Optional[str]) -> str:
    name = text or os.environ.get("NODE_NAME", "")
    if not name:
        raise typer.BadParameter("give the node's name: --node-name NAME or the environment "
                                 "variable NODE_NAME (a DaemonSet sets it from spec.nodeName)")
    if len(name) > 253 or not NODE_NAME.fullmatch(name):
        raise typer.BadParameter(f"{name!r} is not a Kubernetes node name (lower-case letters, "
                                 "digits, '-' and '.')")
    return name


def _poll(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0.1 <= value <= 3600:
        raise typer.BadParameter(f"--poll-interval must be seconds from 0.1 to 3600, not {text!r}")
    return value


app = typer_command.plain_app(PROG)


@app.command(help=f"Kubernetes DRA driver {DRIVER}: publishes a ResourceSlice for this node with "
                  "one device per GPU, whose memory and compute capacity claims share, and "
                  "prepares claims for the kubelet: their containers get the GPU, libnvs.so "
                  "through /etc/ld.so.preload and the scheduler's socket, and the claim's "
                  "memory and compute become their budget. "
                  f"Needs the extra gemshare[dra] ({INSTALL}).")
def plugin(
    ctx: typer.Context,
    kubeconfig: Optional[str] = typer.Option(
        None, "--kubeconfig", metavar="PATH",
        help="the kubeconfig file of the API server (default: the in-cluster service account)"),
    node_name: Optional[str] = typer.Option(
        None, "--node-name", metavar="NAME", show_default=False,
        help="this node's name (default $NODE_NAME)"),
    kubelet_plugins_dir: str = typer.Option(
        DEFAULT_PLUGINS_DIR, "--kubelet-plugins-dir", metavar="DIR", show_default=False,
        callback=_absolute_path,
        help=f"where the driver's socket goes, in {DRIVER}/ (default {DEFAULT_PLUGINS_DIR})"),
    kubelet_registry_dir: str = typer.Option(
        DEFAULT_REGISTRY_DIR, "--kubelet-registry-dir", metavar="DIR", show_default=False,
        callback=_absolute_path,
        help=f"the kubelet's plugin registration directory (default {DEFAULT_REGISTRY_DIR})"),
    cdi_dir: str = typer.Option(
        DEFAULT_CDI_DIR, "--cdi-dir", metavar="DIR", show_default=False,
        callback=_absolute_path,
        help=f"where the container runtime reads CDI specs (default {DEFAULT_CDI_DIR})"),
    memory_unit: str = typer.Option(
        DEFAULT_MEMORY_UNIT, "--memory-unit", metavar="SIZE", show_default=False,
        callback=_memory_unit,
        help=f"the step a claim's memory is counted in, and what a claim that names none gets "
             f"(default {DEFAULT_MEMORY_UNIT})"),
    memory_overcommit: str = typer.Option(
        "1", "--memory-overcommit", metavar="X", show_default=False,
        callback=_memory_overcommit,
        help=f"publish X times each GPU's memory as its capacity, 1 to {MAX_MEMORY_OVERCOMMIT} "
             f"(default 1)"),
    scheduler_socket: Optional[str] = typer.Option(
        None, "--scheduler-socket", metavar="PATH", callback=_absolute_path,
        help=f"the scheduler's socket on the host (default $GEMSHARE_SOCKET, else "
             f"{DEFAULT_SOCKET})"),
    library: str = typer.Option(
        DEFAULT_LIBRARY, "--library", metavar="PATH", show_default=False,
        callback=_absolute_path, help=f"libnvs.so on the host (default {DEFAULT_LIBRARY})"),
    poll_interval: str = typer.Option(
        "10", "--poll-interval", metavar="SECONDS", show_default=False, callback=_poll,
        help="how often the GPUs and the ResourceSlice are looked at (default 10)"),
    health: Optional[str] = typer.Option(
        None, "--health", metavar="ADDR:PORT", callback=typer_command.tcp_address,
        help="answer Kubernetes probes over HTTP: /healthz while the driver's loop runs, "
             "/readyz while it is registered with the kubelet and its ResourceSlice is put "
             "(default: off)"),
    debug: bool = typer_command.debug_flag(),
    show_version: bool = typer_command.version_flag(PROG),
) -> None:
    scheduler = scheduler_socket or str(socket_path())
    if not scheduler.startswith("/"):
        raise typer.BadParameter(f"GEMSHARE_SOCKET={scheduler!r} is not an absolute path; give "
                                 "--scheduler-socket PATH", param_hint="'--scheduler-socket'")
    ctx.obj.append(Options(kubeconfig, _node_name(node_name), kubelet_plugins_dir,
                           kubelet_registry_dir, cdi_dir, memory_unit, memory_overcommit,
                           os.path.normpath(scheduler), library, poll_interval, health,
                           debug or debug_from_environment()))


def parse(argv: Sequence[str]) -> Options:
    return typer_command.parse(app, PROG, argv)


def missing_modules() -> str:
    """What of the extra is not installed, as Python says it; "" for nothing."""
    for module in ("grpc", "google.protobuf", "kubernetes"):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            return str(exc)
    return ""


def main(argv: Optional[Sequence[str]] = None) -> int:
    options = typer_command.read(app, PROG, argv)
    missing = missing_modules()
    if missing:
        print(f"{PROG}: the DRA driver needs gRPC, protobuf and the Kubernetes client, and "
              f"{missing}; {INSTALL}", file=sys.stderr)
        return 1
    from gemshare_plugin.health import serve_until_stopped

    from .api_server import ApiError, ApiServer
    from .cdi import CdiSpecs, HostPaths, write_preload
    from .claims import Preparer
    from .driver import Driver
    from .extended_resources import served_here
    from .resource_slice import Capacity
    from .server import KubeletServices

    logging.basicConfig(level=logging.DEBUG if options.debug else logging.INFO,
                        handlers=[journal.stderr_handler()])
    try:
        api = ApiServer(options.kubeconfig)
        # Bound before anything starts, so that a taken or foreign address stops the start.
        health_socket = bind(*options.health, "probes", "--health") if options.health else None
    except (ApiError, AddressError) as error:
        print(f"{PROG}: {error}", file=sys.stderr)
        return 1
    preload = os.path.join(options.kubelet_plugins_dir, DRIVER, "ld.so.preload")
    try:
        write_preload(preload)
    except OSError as exc:
        print(f"{PROG}: cannot write {preload}, which containers get as /etc/ld.so.preload: "
              f"{exc.strerror or exc}", file=sys.stderr)
        return 1
    capacity = Capacity(options.memory_unit, options.memory_overcommit)
    driver = Driver(options.node_name, api, capacity, poll_s=options.poll_s)
    preparer = Preparer(options.node_name, api, driver.current_inventory, capacity,
                        CdiSpecs(options.cdi_dir),
                        HostPaths(options.library, options.scheduler_socket, preload))
    driver.services = KubeletServices(preparer, options.kubelet_plugins_dir,
                                      options.kubelet_registry_dir)
    log.info("node %s, API server %s, CDI specs in %s", options.node_name, api.host,
             options.cdi_dir)
    log.info("extended resources: %s", served_here(api))
    return serve_until_stopped(driver, health_socket, log)


if __name__ == "__main__":
    sys.exit(main())
