"""`gemshare-scheduler`: command line, logging, signals and systemd around the server.

Also runnable as `python -m gemshare_nvs.daemon`.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time
from pathlib import Path

import trio

from . import fd_limits, journal, sdnotify
from .config import ConfigError
from .configuration import Configuration
from .connection import DEFAULT_SOCKET, socket_path
from .gpus import Gpus
from .listener import ListenerError, Listening, open_listener
from .log_rate import PeerRateLimit
from .protocol import Mode
from .server import Server
from .settings import (CAPACITY_MIB, CONTEXT_RESERVE_MIB, DEFAULT_CONFIG,
                       DEFAULT_CONTEXT_RESERVE_MIB, DEFAULT_CONTROL_GROUP, DEFAULT_GRACE_MS,
                       DEFAULT_MAX_CLIENTS, DEFAULT_MIN_SLICE_MS, DEFAULT_STATE_DIR, DEFAULT_TQ,
                       GRACE_MS, MAX_CLIENTS, MAX_CLIENTS_PER_USER, MIN_SLICE_MS, MODE_LABELS,
                       TQ, Settings, WholeNumber, debug_from_environment)
from .summary import summary_line
from .version import version

log = logging.getLogger("gemshare.scheduler")

HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
IGNORED_UNTIL_RUNNING = (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)

# Options a config file and gemsharectl may also give, with their Settings fields: they are
# None unless given, so that Settings' defaults apply and status can say which were given.
LAYERED = {"tq": "tq", "anti_thrash": "mode", "min_slice_ms": "min_slice_ms",
           "grace_ms": "grace_ms", "context_reserve_mib": "context_reserve_mib",
           "capacity_mib": "capacity_mib"}


def _checked(number: WholeNumber, what: str):
    """An argparse type: a whole number passed through its setting's check."""
    def convert(text: str):
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be a whole number, not {text!r}")
        try:
            return number.check(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc))
    return convert


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gemshare-scheduler",
        description="Hand out an exclusive per-GPU lock to CUDA programs running under "
                    "libnvs.so, one time quantum at a time, first come first served.")
    parser.add_argument("--socket", metavar="PATH",
                        help=f"Unix socket to listen on (default: $GEMSHARE_SOCKET, else "
                             f"{DEFAULT_SOCKET})")
    parser.add_argument("--config", metavar="PATH", default=DEFAULT_CONFIG,
                        help="TOML file of settings and per-client rules, reloaded on SIGHUP and "
                             "when it changes; its settings win over these options, and "
                             "gemsharectl's over both. A missing file, or an empty PATH, means none "
                             f"(default {DEFAULT_CONFIG})")
    parser.add_argument("--state-dir", metavar="DIR", default=DEFAULT_STATE_DIR,
                        help="where settings changed with gemsharectl are kept across restarts; "
                             f"an empty DIR keeps them only while running (default "
                             f"{DEFAULT_STATE_DIR})")
    parser.add_argument("--tq", type=_checked(TQ, "--tq"), metavar="SECONDS",
                        help=f"time quantum in whole seconds, 1-86400 (default {DEFAULT_TQ})")
    parser.add_argument("--anti-thrash", choices=MODE_LABELS,
                        help="on: one lock holder per GPU; off: no lock, everyone runs freely; "
                             "auto: programs whose memory fits on the GPU together hold it "
                             "together, the rest take turns as with on (default on)")
    parser.add_argument("--min-slice-ms", type=_checked(MIN_SLICE_MS, "--min-slice-ms"),
                        metavar="MS",
                        help="how long a holder keeps the lock before a client under its share "
                             "of GPU time may take it (default "
                             f"{DEFAULT_MIN_SLICE_MS})")
    parser.add_argument("--grace-ms", type=_checked(GRACE_MS, "--grace-ms"), metavar="MS",
                        help="how long a holder told to drop the lock may take before it is "
                             f"revoked (default {DEFAULT_GRACE_MS})")
    parser.add_argument("--context-reserve-mib",
                        type=_checked(CONTEXT_RESERVE_MIB, "--context-reserve-mib"),
                        metavar="MIB",
                        help="in auto, GPU memory set aside for each holder's CUDA context "
                             "besides what it allocated, whole MiB from 0 (default "
                             f"{DEFAULT_CONTEXT_RESERVE_MIB})")
    parser.add_argument("--capacity-mib", type=_checked(CAPACITY_MIB, "--capacity-mib"),
                        metavar="MIB",
                        help="in auto, treat each GPU as holding at most this many MiB: room kept "
                             "for programs outside gemshare (default: the GPU's whole memory)")
    parser.add_argument("--max-clients", type=_checked(MAX_CLIENTS, "--max-clients"),
                        default=DEFAULT_MAX_CLIENTS, metavar="N",
                        help=f"most registered clients at once (default {DEFAULT_MAX_CLIENTS})")
    parser.add_argument("--max-clients-per-user",
                        type=_checked(MAX_CLIENTS_PER_USER, "--max-clients-per-user"),
                        metavar="N",
                        help="most clients of one user at once, so that others always find room; "
                             "root is held only to --max-clients (default: a quarter of "
                             "--max-clients)")
    parser.add_argument("--control-group", default=DEFAULT_CONTROL_GROUP, metavar="NAME",
                        help="group whose members may change settings besides root (default "
                             f"{DEFAULT_CONTROL_GROUP})")
    parser.add_argument("--debug", action="store_true",
                        help="log more (also GEMSHARE_DEBUG=1)")
    parser.add_argument("--version", action="version",
                        version=f"gemshare-scheduler {version()}")
    return parser


def parse_args(argv=None) -> Settings:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.control_group.strip():
        parser.error("--control-group must name a group")
    given = frozenset(name for name in LAYERED if getattr(args, name) is not None)
    if args.anti_thrash is not None:
        args.anti_thrash = Mode.from_label(args.anti_thrash)
    return Settings(socket=socket_path(args.socket), max_clients=args.max_clients,
                    max_clients_per_user=args.max_clients_per_user,
                    control_group=args.control_group,
                    **{LAYERED[name]: getattr(args, name) for name in given},
                    given=given, config=Path(args.config) if args.config else None,
                    state_dir=Path(args.state_dir) if args.state_dir else None,
                    debug=args.debug or debug_from_environment())


def setup_logging(debug: bool) -> PeerRateLimit:
    """Log to stderr, as journald wants it when that is where it goes; the filter that keeps
    each peer's warnings few is returned, to be flushed."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(journal.formatter(journal.stderr_is_journal()))
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
                         settings.max_control)
    if caps.clamped:
        log.warning("the file descriptor limit (%d) allows %d clients and %d control "
                    "connections, not the %d and %d asked for: serving that many; raise "
                    "LimitNOFILE= (or ulimit -n) for more", caps.limit, caps.clients,
                    caps.control, settings.max_clients, settings.max_control)
    settings.max_clients, settings.max_control = caps.clients, caps.control


async def run(settings: Settings, configuration: Configuration,
              rate_limit: PeerRateLimit | None = None) -> None:
    # Signals are caught before the socket exists, so a SIGTERM that follows the first
    # connection always ends in a clean exit.
    with trio.open_signal_receiver(*HANDLED_SIGNALS) as signals:
        gpus = Gpus()
        log.info("GPU information: %s", "from NVML" if gpus.available else gpus.reason)
        configuration.announce()
        try:
            listening = open_listener(settings.socket)
            try:
                async with trio.open_nursery() as nursery:
                    server = Server(settings, listening.sock, gpus, configuration)
                    nursery.start_soon(_on_signals, signals, nursery.cancel_scope, server)
                    await nursery.start(server.serve)
                    _announce(settings, configuration.started, listening)
                    interval = sdnotify.watchdog_interval()
                    if interval is not None:
                        log.info("sending WATCHDOG=1 to systemd every %g s", interval)
                        nursery.start_soon(_watchdog, interval)
                    if rate_limit is not None:
                        nursery.start_soon(_flush_periodically, rate_limit)
            finally:
                listening.close()
                if rate_limit is not None:
                    rate_limit.flush(everything=True)
        finally:
            gpus.close()


def _announce(settings: Settings, start: dict, listening: Listening) -> None:
    capacity = ("the GPU's" if start["capacity_mib"] is None
                else f"at most {start['capacity_mib']} MiB")
    log.info("listening on %s%s: tq %d s, anti-thrash %s, min slice %d ms, grace %d ms, "
             "context reserve %d MiB, capacity %s, max %d clients (%d per user), %d control "
             "connections, control group %s",
             listening.path, " (socket from systemd)" if listening.inherited else "",
             start["tq"], start["anti_thrash"].label, start["min_slice_ms"], start["grace_ms"],
             start["context_reserve_mib"], capacity, settings.max_clients,
             settings.clients_per_user(), settings.max_control, settings.control_group)
    _notify("READY=1\nSTATUS=listening on " + str(listening.path))


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
        await trio.sleep(rate_limit.window)
        rate_limit.flush()


def _notify(state: str) -> None:
    try:
        sdnotify.notify(state)
    except OSError as exc:
        log.warning("cannot notify systemd at NOTIFY_SOCKET: %s", exc,
                    extra={"peer": "NOTIFY_SOCKET"})


def main(argv=None) -> int:
    # Until the signal receiver is in place, a SIGHUP or SIGUSR1 sent early must not kill us.
    for signum in IGNORED_UNTIL_RUNNING:
        signal.signal(signum, signal.SIG_IGN)
    settings = parse_args(argv)
    rate_limit = setup_logging(settings.debug)
    fit_connections(settings)
    try:
        configuration = Configuration.start(settings)
    except ConfigError as error:
        for line in error.lines():
            print(f"gemshare-scheduler: {line}", file=sys.stderr)
        print(f"gemshare-scheduler: not starting: fix {error.path} (gemsharectl config check "
              f"{error.path} shows every problem)", file=sys.stderr)
        return 2
    try:
        trio.run(run, settings, configuration, rate_limit)
    except ListenerError as exc:
        print(f"gemshare-scheduler: {exc}", file=sys.stderr)
        return 1
    log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
