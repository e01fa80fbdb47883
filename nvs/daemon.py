"""`gemshare-scheduler`: command line, logging, signals and systemd around the server.

Also runnable as `python -m gemshare_nvs.daemon`.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from pathlib import Path

import trio

from . import sdnotify
from .config import ConfigError
from .configuration import Configuration
from .connection import DEFAULT_SOCKET, socket_path
from .gpus import Gpus
from .listener import ListenerError, Listening, open_listener
from .protocol import Mode
from .server import Server
from .settings import (CAPACITY_MIB, CONTEXT_RESERVE_MIB, DEFAULT_CONFIG,
                       DEFAULT_CONTEXT_RESERVE_MIB, DEFAULT_CONTROL_GROUP, DEFAULT_GRACE_MS,
                       DEFAULT_MAX_CLIENTS, DEFAULT_MIN_SLICE_MS, DEFAULT_STATE_DIR, DEFAULT_TQ,
                       GRACE_MS, MAX_CLIENTS, MIN_SLICE_MS, MODE_LABELS, TQ, Settings,
                       WholeNumber, debug_from_environment)

log = logging.getLogger("gemshare.scheduler")

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
    parser.add_argument("--control-group", default=DEFAULT_CONTROL_GROUP, metavar="NAME",
                        help="group whose members may change settings besides root (default "
                             f"{DEFAULT_CONTROL_GROUP})")
    parser.add_argument("--debug", action="store_true",
                        help="log more (also GEMSHARE_DEBUG=1)")
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
                    control_group=args.control_group,
                    **{LAYERED[name]: getattr(args, name) for name in given},
                    given=given, config=Path(args.config) if args.config else None,
                    state_dir=Path(args.state_dir) if args.state_dir else None,
                    debug=args.debug or debug_from_environment())


def setup_logging(debug: bool) -> None:
    # journald stamps each line itself; a terminal or a file needs the time in the line.
    stamp = "" if os.environ.get("JOURNAL_STREAM") else "%(asctime)s.%(msecs)03d "
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(stamp + "%(levelname)s %(message)s",
                                           "%Y-%m-%d %H:%M:%S"))
    root = logging.getLogger("gemshare")
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if debug else logging.INFO)
    root.propagate = False


async def run(settings: Settings, configuration: Configuration) -> None:
    # Signals are caught before the socket exists, so a SIGTERM that follows the first
    # connection always ends in a clean exit.
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
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
            finally:
                listening.close()
        finally:
            gpus.close()


def _announce(settings: Settings, start: dict, listening: Listening) -> None:
    capacity = ("the GPU's" if start["capacity_mib"] is None
                else f"at most {start['capacity_mib']} MiB")
    log.info("listening on %s%s: tq %d s, anti-thrash %s, min slice %d ms, grace %d ms, "
             "context reserve %d MiB, capacity %s, max %d clients, control group %s",
             listening.path, " (socket from systemd)" if listening.inherited else "",
             start["tq"], start["anti_thrash"].label, start["min_slice_ms"], start["grace_ms"],
             start["context_reserve_mib"], capacity, settings.max_clients,
             settings.control_group)
    _notify("READY=1\nSTATUS=listening on " + str(listening.path))


async def _on_signals(signals, scope: trio.CancelScope, server: Server) -> None:
    """SIGHUP reloads the config file (systemctl reload); SIGTERM and SIGINT stop."""
    async for signum in signals:
        if signum == signal.SIGHUP:
            # systemd waits for READY=1 after RELOADING=1, so `systemctl reload` returns
            # once the file has been read.
            now_us = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
            _notify(f"RELOADING=1\nMONOTONIC_USEC={now_us}")
            await server.reload("SIGHUP")
            _notify("READY=1")
            continue
        log.info("%s received: stopping", signal.Signals(signum).name)
        _notify("STOPPING=1")
        scope.cancel()
        return


def _notify(state: str) -> None:
    try:
        sdnotify.notify(state)
    except OSError as exc:
        log.warning("cannot notify systemd at NOTIFY_SOCKET: %s", exc)


def main(argv=None) -> int:
    settings = parse_args(argv)
    setup_logging(settings.debug)
    try:
        configuration = Configuration.start(settings)
    except ConfigError as error:
        for line in error.lines():
            print(f"gemshare-scheduler: {line}", file=sys.stderr)
        print(f"gemshare-scheduler: not starting: fix {error.path} (gemsharectl config check "
              f"{error.path} shows every problem)", file=sys.stderr)
        return 2
    try:
        trio.run(run, settings, configuration)
    except ListenerError as exc:
        print(f"gemshare-scheduler: {exc}", file=sys.stderr)
        return 1
    log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
