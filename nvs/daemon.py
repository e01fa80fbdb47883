"""`gemshare-scheduler`: logging, signals and systemd around the server, started with the
settings its command line (command_line.py) gives.

Also runnable as `python -m gemshare_nvs.daemon`.
"""

from __future__ import annotations

from .service import early_signals

# First, before the imports below take their while: a SIGHUP meanwhile must not kill the start.
early_signals.hold()

import logging  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import trio  # noqa: E402

from .config.configuration import Configuration  # noqa: E402
from .config.parsing import ConfigError  # noqa: E402
from .config.settings import Settings  # noqa: E402
from .kubernetes.grpc_calls import GrpcMissing  # noqa: E402
from .kubernetes.lookups import NodeLookups, node_lookups  # noqa: E402
from .observe.summary import summary_line  # noqa: E402
from .observe.tcp_address import AddressError, bind  # noqa: E402
from .service import command_line, fd_limits, journal, sdnotify  # noqa: E402
from .service.gpus import Gpus  # noqa: E402
from .service.log_rate import PeerRateLimit  # noqa: E402
from .service.permissions import missing_group_warning  # noqa: E402
from .service.readiness import LISTENING  # noqa: E402
from .service.server import Server  # noqa: E402
from .wire.listener import ListenerError, Listening, open_listener  # noqa: E402

log = logging.getLogger("gemshare.scheduler")

HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT, *early_signals.HELD)
# How long a thread may hold Python's lock while the event loop wants it (Python's default is 5
# ms): a thread parsing a big config file would otherwise add that to every wake-up of the loop,
# and to each handoff during a reload (bench/abuse.py measures it).
GIL_SWITCH_SECONDS = 0.0005


def setup_logging(debug: bool) -> PeerRateLimit:
    """Log to stderr, as journald wants it when that is where it goes; the filter that keeps
    each peer's warnings few is returned, to be flushed."""
    handler = journal.stderr_handler()
    rate_limit = PeerRateLimit()
    handler.addFilter(rate_limit)
    root = logging.getLogger("gemshare")
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if debug else logging.INFO)
    root.propagate = False
    return rate_limit


def fit_connections(settings: Settings) -> None:
    """Raise the descriptor limit as far as allowed, and bring the connection caps within it."""
    caps = fd_limits.fit(fd_limits.raise_soft_limit(), settings.max_clients,
                         settings.max_control, settings.max_view_only)
    if caps.clamped:
        log.warning("the file descriptor limit (%d) allows %d clients, %d control connections "
                    "and %d view-only registrations, not the %d, %d and %d asked for: serving "
                    "that many; raise LimitNOFILE= (or ulimit -n) for more", caps.limit,
                    caps.clients, caps.control, caps.view_only, settings.max_clients,
                    settings.max_control, settings.max_view_only)
    settings.max_clients, settings.max_control, settings.max_view_only = \
        caps.clients, caps.control, caps.view_only


async def run(settings: Settings, configuration: Configuration, listening: Listening,
              rate_limit: PeerRateLimit | None = None, metrics_socket=None,
              node: NodeLookups | None = None) -> None:
    # Signals are caught before the socket exists, so a SIGTERM that follows the first
    # connection always ends in a clean exit.
    with trio.open_signal_receiver(*HANDLED_SIGNALS) as signals:
        for signum in early_signals.replay():
            log.info("%s came while starting: acting on it now", signal.Signals(signum).name)
        gpus = Gpus()
        log.info("GPU information: %s", "from NVML" if gpus.available else gpus.reason)
        configuration.announce()
        try:
            async with trio.open_nursery() as nursery:
                server = Server(settings, listening.sock, gpus, configuration, node)
                nursery.start_soon(_on_signals, signals, nursery.cancel_scope, server)
                await nursery.start(server.serve)
                if metrics_socket is not None:
                    nursery.start_soon(_serve_metrics, metrics_socket, server)
                _announce(settings, configuration.started, listening)
                interval = sdnotify.watchdog_interval()
                if interval is not None:
                    log.info("sending WATCHDOG=1 to systemd every %g s", interval)
                    nursery.start_soon(_watchdog, interval)
                if rate_limit is not None:
                    nursery.start_soon(_flush_periodically, rate_limit)
        finally:
            if rate_limit is not None:
                rate_limit.flush(everything=True)
            gpus.close()


async def _serve_metrics(sock, server: Server) -> None:
    # Imported here, by the schedulers that serve metrics only: prometheus_client is a good
    # part of the time it takes to start.
    from .observe.metrics import registry_for
    from .observe.metrics_http import serve
    await serve(sock, registry_for(server.policy, trio.current_time, server.mps_status),
                server.readiness)


def _announce(settings: Settings, start: dict, listening: Listening) -> None:
    capacity = ("the GPU's" if start["capacity_mib"] is None
                else f"at most {start['capacity_mib']} MiB")
    log.info(LISTENING + "%s%s: tq %d s, anti-thrash %s, min slice %d ms, grace %d ms, "
             "context reserve %d MiB, capacity %s, max %d clients (%d per user), %d control "
             "connections, %d view-only registrations, control group %s, MPS %s",
             listening.path, " (socket from systemd)" if listening.inherited else "",
             start["tq"], start["anti_thrash"].label, start["min_slice_ms"], start["grace_ms"],
             start["context_reserve_mib"], capacity, settings.max_clients,
             settings.clients_per_user(), settings.max_control, settings.max_view_only,
             settings.control_group,
             "on" if start["mps"] else "off")
    _notify("READY=1\nSTATUS=" + LISTENING + str(listening.path))


async def _on_signals(signals, scope: trio.CancelScope, server: Server) -> None:
    """SIGHUP reloads the config file (systemctl reload); SIGUSR1 and SIGUSR2 log a status
    line; SIGTERM and SIGINT stop."""
    async for signum in signals:
        if signum == signal.SIGHUP:
            # systemd waits for READY=1 after RELOADING=1, so `systemctl reload` returns
            # once the file has been read.
            now_us = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
            _notify(f"RELOADING=1\nMONOTONIC_USEC={now_us}")
            await server.reload("SIGHUP")
            _notify("READY=1")
            continue
        if signum in (signal.SIGUSR1, signal.SIGUSR2):
            name = signal.Signals(signum).name
            try:
                log.info("%s received: %s", name, summary_line(await server.status()))
            except Exception:  # a status line is not worth the scheduler
                log.exception("%s received: cannot build the status line", name)
            continue
        log.info("%s received: stopping", signal.Signals(signum).name)
        _notify("STOPPING=1")
        scope.cancel()
        return


async def _watchdog(interval: float) -> None:
    """Tell systemd the event loop still turns; if it stops (a hang, SIGSTOP), so do these and
    systemd restarts the service once WatchdogSec= has passed."""
    while True:
        _notify("WATCHDOG=1")
        await trio.sleep(interval)


async def _flush_periodically(rate_limit: PeerRateLimit) -> None:
    """Say how many lines each noisy peer had left out, also when it has gone quiet."""
    while True:
        await trio.sleep(rate_limit.report_seconds)
        rate_limit.flush()


def _notify(state: str) -> None:
    try:
        sdnotify.notify(state)
    except OSError as exc:
        log.warning("cannot notify systemd at NOTIFY_SOCKET: %s", exc,
                    extra={"peer": "NOTIFY_SOCKET"})


def main(argv=None) -> int:
    sys.setswitchinterval(GIL_SWITCH_SECONDS)
    settings = command_line.read(argv)
    rate_limit = setup_logging(settings.debug)
    # The socket first: a second scheduler on it says so alone, before any line that would
    # describe a start that is not going to happen.
    try:
        listening = open_listener(settings.socket)
    except ListenerError as exc:
        print(f"gemshare-scheduler: {exc}", file=sys.stderr)
        return 1
    try:
        status = _start(settings, rate_limit, listening)
    finally:
        listening.close()
    if status == 0:
        log.info("stopped")
    return status


def _start(settings: Settings, rate_limit: PeerRateLimit, listening: Listening) -> int:
    """The start once the socket is ours, and the run; the exit status."""
    fit_connections(settings)
    group_warning = missing_group_warning(settings.control_group, os.geteuid())
    if group_warning is not None:
        log.warning("%s", group_warning)
    try:
        configuration = Configuration.start(settings)
    except ConfigError as error:
        for line in error.lines():
            print(f"gemshare-scheduler: {line}", file=sys.stderr)
        print(f"gemshare-scheduler: not starting: fix {error.path} (gemsharectl config check "
              f"{error.path} shows every problem)", file=sys.stderr)
        return 2
    start = configuration.started
    try:
        node = node_lookups(start["cri_socket"], start["pod_resources_socket"], settings.proc,
                            start["node_identity_socket"])
    except GrpcMissing as missing:  # a socket was given: running without it would be a surprise
        print(f"gemshare-scheduler: {missing}", file=sys.stderr)
        return 2
    try:
        # Bound before anything else starts: a taken address stops the start, naming it.
        metrics_socket = bind(*settings.metrics, "metrics", "--metrics") if settings.metrics \
            else None
    except AddressError as exc:
        print(f"gemshare-scheduler: {exc}", file=sys.stderr)
        return 1
    trio.run(run, settings, configuration, listening, rate_limit, metrics_socket, node)
    return 0


if __name__ == "__main__":
    sys.exit(main())
