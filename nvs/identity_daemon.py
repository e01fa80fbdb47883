"""`gemshare-node-identity`: the container runtime's and the kubelet's sockets in a container of
their own, beside the scheduler's in its pod, answering it one question: which pod and
container is this, and what was it allocated (kubernetes/identity_server.py).

The scheduler, given `--node-identity-socket`, asks here and mounts neither socket. Without
--cri-socket the first of containerd's and CRI-O's that exists is used, looked for again every
few seconds while none does; `/readyz` fails while a socket it needs is missing.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
from dataclasses import dataclass
from typing import Optional, Sequence

import typer

from .config.settings import CRI_SOCKET, POD_RESOURCES_SOCKET, check_socket, \
    debug_from_environment
from .kubernetes.grpc_calls import GrpcMissing, require_grpc
from .kubernetes.node import DEFAULT_CRI_SOCKETS, DEFAULT_POD_RESOURCES_SOCKET, NodeLookup, \
    chosen_sockets
from .observe.probe_http import LIVENESS, READINESS, ProbeServer
from .observe.tcp_address import AddressError, bind
from .service import journal, typer_command

PROG = "gemshare-node-identity"
DEFAULT_SOCKET = "/var/run/gemshare-identity/identity.sock"
LOOK_AGAIN_S = 5.0  # for a runtime socket that is not there yet

log = logging.getLogger(PROG)


@dataclass(frozen=True)
class Options:
    socket: str
    cri_socket: Optional[str]
    pod_resources_socket: str
    health: Optional[tuple[str, int]]
    debug: bool


def _runtime_socket(text: Optional[str]) -> Optional[str]:
    """An absolute path, never "" (none): the service is there to ask the runtime."""
    if text is not None and not text.startswith("/"):
        raise typer.BadParameter(f"give the container runtime's socket as an absolute path, or "
                                 f"leave the option out for the first that exists, not {text!r}")
    return typer_command.checked_text(CRI_SOCKET, "cri_socket", "--cri-socket")(text)


app = typer_command.plain_app(PROG)


@app.command(help="Answer gemshare-scheduler's one question of the node, which pod and "
                  "container a program is in and what the kubelet allocated it, from the "
                  "container runtime's CRI socket and the kubelet's pod-resources socket, so "
                  "that the scheduler's own container needs neither. Needs the extra "
                  "gemshare[kubernetes].")
def identity(
    ctx: typer.Context,
    listen: str = typer.Option(
        DEFAULT_SOCKET, "--socket", metavar="PATH", show_default=False,
        callback=typer_command.checked_text(check_socket("socket"), "socket", "--socket"),
        help=f"where to answer (default {DEFAULT_SOCKET}); the scheduler's "
             "--node-identity-socket"),
    cri_socket: Optional[str] = typer.Option(
        None, "--cri-socket", metavar="PATH",
        callback=_runtime_socket,
        help="the container runtime's CRI socket (default: the first that exists of "
             f"{' and '.join(DEFAULT_CRI_SOCKETS)})"),
    pod_resources_socket: str = typer.Option(
        DEFAULT_POD_RESOURCES_SOCKET, "--pod-resources-socket", metavar="PATH",
        show_default=False,
        callback=typer_command.checked_text(POD_RESOURCES_SOCKET, "pod_resources_socket",
                                            "--pod-resources-socket"),
        help=f"the kubelet's pod-resources socket; \"\" for none (default "
             f"{DEFAULT_POD_RESOURCES_SOCKET})"),
    health: Optional[str] = typer.Option(
        None, "--health", metavar="ADDR:PORT", callback=typer_command.tcp_address,
        help=f"answer Kubernetes probes over HTTP: {LIVENESS} while it runs, {READINESS} while "
             "the sockets it asks are there (default: off)"),
    debug: bool = typer_command.debug_flag(),
    show_version: bool = typer_command.version_flag(PROG),
) -> None:
    if not listen:
        raise typer.BadParameter("give the path to answer on", param_hint="'--socket'")
    ctx.obj.append(Options(listen, cri_socket, pod_resources_socket, health,
                           debug or debug_from_environment()))


def listen_on(path: str) -> socket.socket:
    """A socket at `path` that only root and its owner may connect to; OSError."""
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    try:
        os.unlink(path)  # a previous run's: this container is the only one that answers here
    except FileNotFoundError:
        pass
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    os.chmod(path, 0o600)
    sock.listen(64)
    return sock


def verdict(server, path: str) -> tuple[int, str]:
    if path == LIVENESS:
        return 200, "ok"
    if path == READINESS:
        why = server.readiness()
        return (200, "ok") if why is None else (503, f"not ready: {why}")
    return 404, f"the probes are {LIVENESS} and {READINESS}"


def find_runtime(server, options: Options, stop: threading.Event) -> None:
    """Until a runtime's socket exists: look again, and ask it once it does."""
    while server.lookup.cri is None and not stop.wait(LOOK_AGAIN_S):
        cri, _ = chosen_sockets(None, "")
        if cri:
            log.info("the container runtime's socket %s is there now", cri)
            old, server.lookup = server.lookup, NodeLookup(cri, options.pod_resources_socket)
            old.close()


def main(argv: Optional[Sequence[str]] = None) -> int:
    options = typer_command.read(app, PROG, argv)
    try:
        require_grpc("the node-identity service")
    except GrpcMissing as missing:
        print(f"{PROG}: {missing}", file=sys.stderr)
        return 1
    from .kubernetes.identity_server import IdentityServer

    logging.basicConfig(level=logging.DEBUG if options.debug else logging.INFO,
                        handlers=[journal.stderr_handler()])
    try:
        health_socket = bind(*options.health, "probes", "--health") if options.health else None
        listener = listen_on(options.socket)
    except AddressError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"{PROG}: cannot answer on {options.socket}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    cri, pod_resources = chosen_sockets(options.cri_socket, options.pod_resources_socket)
    server = IdentityServer(listener, NodeLookup(cri, pod_resources))
    why = server.readiness()
    log.info("answering on %s from the runtime at %s and the kubelet at %s%s", options.socket,
             cri or "(none found yet)", pod_resources or "(none)",
             f"; not ready: {why}" if why else "")
    stop = threading.Event()

    def stop_on_signal(number, frame):
        log.info("stopping on %s", signal.Signals(number).name)
        stop.set()
        server.stop()

    signal.signal(signal.SIGTERM, stop_on_signal)
    signal.signal(signal.SIGINT, stop_on_signal)
    probes = ProbeServer(health_socket, lambda path: verdict(server, path), log) \
        if health_socket is not None else None
    if probes is not None:
        probes.start()
    threading.Thread(target=find_runtime, args=(server, options, stop), daemon=True,
                     name="find-runtime").start()
    try:
        server.serve()
    finally:
        if probes is not None:
            probes.stop()
        listener.close()
        server.lookup.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
