"""gemshare-scheduler's command line: its options, their checks, and the Settings they give.

Each number goes through its setting's own check (settings.py), so a bad value is refused in
the words the config file and gemsharectl use for it, before anything starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import typer

from ..config.settings import (
    CAPACITY_MIB,
    COMPUTE_CAP,
    COMPUTE_CAPS,
    CONTEXT_RESERVE_MIB,
    CRI_SOCKET,
    DEFAULT_CONFIG,
    DEFAULT_CONTEXT_RESERVE_MIB,
    DEFAULT_CONTROL_GROUP,
    DEFAULT_GRACE_MS,
    DEFAULT_MAX_CLIENTS,
    DEFAULT_MIN_SLICE_MS,
    DEFAULT_STATE_DIR,
    DEFAULT_TQ,
    GRACE_MS,
    MAX_CLIENTS,
    MAX_CLIENTS_PER_USER,
    MIN_SLICE_MS,
    MODE_LABELS,
    NODE_IDENTITY_SOCKET,
    POD_RESOURCES_SOCKET,
    STAGING_MAX_MIB,
    TQ,
    Settings,
    WholeNumber,
    check_mode,
    debug_from_environment,
    modes_starting,
)
from ..kubernetes.node import DEFAULT_CRI_SOCKETS, DEFAULT_POD_RESOURCES_SOCKET
from ..wire.connection import DEFAULT_SOCKET, socket_path
from . import typer_command

PROG = "gemshare-scheduler"

# Options a config file and gemsharectl may also give, with their Settings fields: they are
# None unless given, so that Settings' defaults apply and status can say which were given.
LAYERED = {"tq": "tq", "anti_thrash": "mode", "min_slice_ms": "min_slice_ms",
           "grace_ms": "grace_ms", "context_reserve_mib": "context_reserve_mib",
           "capacity_mib": "capacity_mib", "staging_max_mib": "staging_max_mib", "mps": "mps",
           "mps_pipe_directory": "mps_pipe_directory", "cri_socket": "cri_socket",
           "pod_resources_socket": "pod_resources_socket",
           "node_identity_socket": "node_identity_socket", "compute_cap": "compute_cap"}


def _checked(number: WholeNumber):
    """A Typer callback: a whole number passed through its setting's check, refused in the
    words the config file and gemsharectl use; None passes."""
    def convert(text: Optional[str]) -> Optional[int]:
        if text is None:
            return None
        try:
            return number.from_text(text)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
    return convert


def _group(text: str) -> str:
    if not text.strip():
        raise typer.BadParameter("--control-group must name a group")
    return text


app = typer_command.plain_app(PROG)


@app.command(help="Share NVIDIA GPUs between the CUDA programs running under libnvs.so. With "
                  "--anti-thrash on each GPU's lock goes to one program at a time for a time "
                  "quantum, a program under its share of GPU time (by its weight) first, the "
                  "rest first come first served; with auto the programs whose memory fits on "
                  "the GPU together hold it together; with off every program submits freely; "
                  "and with --mps programs that hold a GPU together run at once through NVIDIA "
                  "MPS.")
def scheduler(
    ctx: typer.Context,
    socket: Optional[str] = typer.Option(
        None, "--socket", metavar="PATH",
        help=f"Unix socket to listen on (default: $GEMSHARE_SOCKET, else {DEFAULT_SOCKET})"),
    config: str = typer.Option(
        DEFAULT_CONFIG, "--config", metavar="PATH", show_default=False,
        help="TOML file of settings and per-client rules, reloaded on SIGHUP and when it "
             "changes; its settings win over these options, and gemsharectl's over both. A "
             f"missing file, or an empty PATH, means none (default {DEFAULT_CONFIG})"),
    state_dir: str = typer.Option(
        DEFAULT_STATE_DIR, "--state-dir", metavar="DIR", show_default=False,
        help="where settings changed with gemsharectl are kept across restarts; an empty DIR "
             f"keeps them only while running (default {DEFAULT_STATE_DIR})"),
    tq: Optional[str] = typer.Option(
        None, "--tq", metavar="SECONDS", callback=_checked(TQ),
        help=f"time quantum, {TQ.span} (default {DEFAULT_TQ})"),
    anti_thrash: Optional[str] = typer.Option(
        None, "--anti-thrash", metavar="|".join(MODE_LABELS),
        callback=typer_command.checked_text(check_mode, "anti_thrash", "--anti-thrash"),
        autocompletion=modes_starting,
        help="on: one lock holder per GPU; off: no lock, everyone runs freely; auto: programs "
             "whose memory fits on the GPU together hold it together, the rest take turns as "
             "with on (default on)"),
    min_slice_ms: Optional[str] = typer.Option(
        None, "--min-slice-ms", metavar="MS", callback=_checked(MIN_SLICE_MS),
        help="how long a holder keeps the lock before a client under its share of GPU time "
             f"may take it, {MIN_SLICE_MS.span} (default {DEFAULT_MIN_SLICE_MS})"),
    grace_ms: Optional[str] = typer.Option(
        None, "--grace-ms", metavar="MS", callback=_checked(GRACE_MS),
        help="how long a holder told to drop the lock may take before it is revoked, "
             f"{GRACE_MS.span} (default {DEFAULT_GRACE_MS})"),
    context_reserve_mib: Optional[str] = typer.Option(
        None, "--context-reserve-mib", metavar="MIB",
        callback=_checked(CONTEXT_RESERVE_MIB),
        help="in auto, GPU memory set aside for each holder's CUDA context besides what it "
             f"allocated, {CONTEXT_RESERVE_MIB.span} (default {DEFAULT_CONTEXT_RESERVE_MIB})"),
    capacity_mib: Optional[str] = typer.Option(
        None, "--capacity-mib", metavar="MIB", callback=_checked(CAPACITY_MIB),
        help="in auto, treat each GPU as holding at most this many MiB: room kept for "
             f"programs outside gemshare, {CAPACITY_MIB.span} (default: the GPU's whole "
             "memory)"),
    staging_max_mib: Optional[str] = typer.Option(
        None, "--staging-max-mib", metavar="MIB", callback=_checked(STAGING_MAX_MIB),
        help="host memory all programs' staging memory may take together (pinned memory that "
             "moves off the GPU go through; past it the driver migrates), "
             f"{STAGING_MAX_MIB.span} (default: what the host has free, less a sixteenth)"),
    max_clients: str = typer.Option(
        str(DEFAULT_MAX_CLIENTS), "--max-clients", metavar="N", show_default=False,
        callback=_checked(MAX_CLIENTS),
        help=f"most registered clients at once, {MAX_CLIENTS.span} (default "
             f"{DEFAULT_MAX_CLIENTS})"),
    max_clients_per_user: Optional[str] = typer.Option(
        None, "--max-clients-per-user", metavar="N",
        callback=_checked(MAX_CLIENTS_PER_USER),
        help="most clients of one user at once, so that others always find room; root is held "
             f"only to --max-clients; {MAX_CLIENTS_PER_USER.span} (default: a quarter of "
             "--max-clients)"),
    control_group: str = typer.Option(
        DEFAULT_CONTROL_GROUP, "--control-group", metavar="NAME", show_default=False,
        callback=_group,
        help="group whose members may change settings besides root and the user the "
             f"scheduler runs as (default {DEFAULT_CONTROL_GROUP})"),
    mps: bool = typer.Option(
        False, "--mps", show_default=False,
        help="run programs that may hold a GPU together (auto when they fit, and off) through "
             "NVIDIA MPS, so that their kernels run at once: starts nvidia-cuda-mps-control "
             "from PATH with pipe and log directories beside the socket (default: off)"),
    mps_pipe_directory: Optional[str] = typer.Option(
        None, "--mps-pipe-directory", metavar="DIR", callback=typer_command.pipe_directory,
        help="with --mps, adopt the MPS control daemon already running with this pipe "
             "directory instead of starting one (implies --mps)"),
    cri_socket: Optional[str] = typer.Option(
        None, "--cri-socket", metavar="PATH",
        callback=typer_command.checked_text(CRI_SOCKET, "cri_socket", "--cri-socket"),
        help="the container runtime's CRI socket, asked which Kubernetes pod and container "
             "each program is in; \"\" for none (default: the first that exists of "
             f"{' and '.join(DEFAULT_CRI_SOCKETS)})"),
    pod_resources_socket: Optional[str] = typer.Option(
        None, "--pod-resources-socket", metavar="PATH",
        callback=typer_command.checked_text(POD_RESOURCES_SOCKET, "pod_resources_socket",
                                            "--pod-resources-socket"),
        help="the kubelet's pod-resources socket, asked what memory and compute units each "
             f"container was allocated; \"\" for none (default: {DEFAULT_POD_RESOURCES_SOCKET}"
             " where it exists)"),
    node_identity_socket: Optional[str] = typer.Option(
        None, "--node-identity-socket", metavar="PATH",
        callback=typer_command.checked_text(NODE_IDENTITY_SOCKET, "node_identity_socket",
                                            "--node-identity-socket"),
        help="ask the node-identity service on this socket (gemshare-node-identity, in a "
             "container beside the scheduler's) for each program's container and units, "
             "instead of the CRI and pod-resources sockets (default: none)"),
    compute_cap: Optional[str] = typer.Option(
        None, "--compute-cap", metavar="|".join(COMPUTE_CAPS),
        callback=typer_command.checked_text(COMPUTE_CAP.check, "compute_cap", "--compute-cap"),
        help="what a container's compute units cap besides its weight: off, gpu_limit (its "
             "share of lock time, units / 100) or sm_share (its MPS share of the "
             "multiprocessors, units) (default off)"),
    metrics: Optional[str] = typer.Option(
        None, "--metrics", metavar="ADDR:PORT", callback=typer_command.tcp_address,
        help="serve Prometheus metrics over HTTP at http://ADDR:PORT/metrics, e.g. "
             "127.0.0.1:9410 ([::1]:9410 for IPv6; default: off)"),
    debug: bool = typer_command.debug_flag(),
    show_version: bool = typer_command.version_flag(PROG),
) -> None:
    values = {"tq": tq, "min_slice_ms": min_slice_ms, "grace_ms": grace_ms,
              "context_reserve_mib": context_reserve_mib, "capacity_mib": capacity_mib,
              "staging_max_mib": staging_max_mib,
              "anti_thrash": anti_thrash, "mps_pipe_directory": mps_pipe_directory,
              "mps": True if mps or mps_pipe_directory is not None else None,
              "cri_socket": cri_socket, "pod_resources_socket": pod_resources_socket,
              "node_identity_socket": node_identity_socket,
              "compute_cap": compute_cap}
    given = frozenset(name for name, value in values.items() if value is not None)
    # Handed back through ctx.obj, a list: a standalone run drops what the command returns.
    ctx.obj.append(Settings(
        socket=socket_path(socket), max_clients=max_clients,
        max_clients_per_user=max_clients_per_user, control_group=control_group,
        **{LAYERED[name]: values[name] for name in given}, given=given,
        config=Path(config) if config else None,
        state_dir=Path(state_dir) if state_dir else None,
        metrics=metrics, debug=debug or debug_from_environment()))


def option_names() -> set[str]:
    """Every long option the scheduler takes, --help aside."""
    return typer_command.option_names(app)


def parse(argv: Sequence[str]) -> Settings:
    """The settings a command line gives, for checking one (typer_command.parse)."""
    return typer_command.parse(app, PROG, argv)


def read(argv: Optional[Sequence[str]] = None) -> Settings:
    """The settings this process's command line gives, else the process ends here
    (typer_command.read)."""
    return typer_command.read(app, PROG, argv)
