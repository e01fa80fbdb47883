"""`gemshare-device-plugin`: the command line, logging and signals around lifecycle.Plugin."""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import sys
import threading

from gemshare_nvs.version import version
from gemshare_nvs.wire.connection import DEFAULT_SOCKET, socket_path

from .allocation import CONTAINER_LIBRARY, Paths
from .lifecycle import Plugin

DEFAULT_SOCKET_DIR = "/var/lib/kubelet/device-plugins"
DEFAULT_LIBRARY = "/usr/local/lib/libnvs.so"
DEFAULT_RESOURCE = "gemshare.io/gpu"
MAX_SLOTS = 1000
# An extended resource name as the kubelet accepts it: a DNS subdomain, "/", a name.
RESOURCE_NAME = re.compile(r"(?=.{1,253}/)[a-z0-9]([-a-z0-9.]*[a-z0-9])?"
                           r"/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")

log = logging.getLogger("gemshare-device-plugin")


def slot_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_SLOTS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a whole number of slots from 1 to {MAX_SLOTS}")
    return value


def resource_name(text: str) -> str:
    if not RESOURCE_NAME.fullmatch(text) or text.split("/")[0].endswith("kubernetes.io"):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an extended resource name such as {DEFAULT_RESOURCE} "
            f"(a domain outside kubernetes.io, '/', a name)")
    return text


def absolute_path(text: str) -> str:
    if not text.startswith("/"):
        raise argparse.ArgumentTypeError(f"{text!r} is not an absolute path")
    return os.path.normpath(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gemshare-device-plugin",
        description="Kubernetes device plugin: advertises N gemshare slots per GPU to the "
                    "kubelet and gives each container that gets slots libnvs.so, the "
                    "scheduler's socket and its GPUs.")
    parser.add_argument("--kubelet-socket-dir", type=absolute_path, default=DEFAULT_SOCKET_DIR,
                        metavar="DIR", help="the kubelet's device-plugin directory, which holds "
                        f"kubelet.sock (default {DEFAULT_SOCKET_DIR})")
    parser.add_argument("--slots", type=slot_count, default=10, metavar="N",
                        help="slots advertised per GPU: how many containers may share one "
                        "(default 10)")
    parser.add_argument("--resource-name", type=resource_name, default=DEFAULT_RESOURCE,
                        metavar="NAME", help=f"the resource pods ask for (default "
                        f"{DEFAULT_RESOURCE})")
    parser.add_argument("--scheduler-socket", type=absolute_path, default=None, metavar="PATH",
                        help="the scheduler's socket on the host (default GEMSHARE_SOCKET, "
                        f"else {DEFAULT_SOCKET})")
    parser.add_argument("--library", type=absolute_path, default=DEFAULT_LIBRARY,
                        metavar="PATH", help="libnvs.so on the host, mounted into containers "
                        f"at {CONTAINER_LIBRARY} (default {DEFAULT_LIBRARY})")
    parser.add_argument("--debug", action="store_true",
                        default=os.environ.get("GEMSHARE_DEBUG") == "1",
                        help="more log lines (also GEMSHARE_DEBUG=1)")
    parser.add_argument("--version", action="version",
                        version=f"gemshare-device-plugin {version()}")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    scheduler = args.scheduler_socket or str(socket_path())
    if not scheduler.startswith("/"):
        parser.error(f"GEMSHARE_SOCKET={scheduler!r} is not an absolute path; give "
                     f"--scheduler-socket PATH")
    logging.basicConfig(stream=sys.stderr, level=logging.DEBUG if args.debug else logging.INFO,
                        format="%(asctime)s gemshare-device-plugin %(levelname)s %(message)s")
    paths = Paths(library=args.library, scheduler_socket=os.path.normpath(scheduler))
    if not os.path.exists(args.library):
        log.warning("%s is not visible here; containers mount it from that path on the host, "
                    "so it must exist there (--library names another)", args.library)
    plugin = Plugin(args.kubelet_socket_dir, args.resource_name, args.slots, paths)
    stop = threading.Event()

    def stop_on_signal(number, frame):
        log.info("stopping on %s", signal.Signals(number).name)
        stop.set()

    signal.signal(signal.SIGTERM, stop_on_signal)
    signal.signal(signal.SIGINT, stop_on_signal)
    plugin.run(stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
