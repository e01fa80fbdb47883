"""Inference servers that each size themselves to the whole card, on the fake driver, through the
real scheduler and the real libnvs.so (tests/libnvs/test_llm_servers.py; the GPU's part is
bench/llm_servers.py, bench/scenarios.py names both).

Each server is a stand-in that allocates what a vLLM-style engine does: 90% of the device in
all, weights (a tenth of it) and a cache (the rest), as two allocations. It writes its weights
once at start (the `fill` kernel) and never touches the cache, as a server whose KV cache stays
mostly empty. Then it serves bursts (a request: the weights read, here written again by `fill`,
and LAUNCHES kernels of KERNEL_US, then a synchronization), its own every 2 x PERIOD_S, the
servers' bursts alternating, so that each burst comes after an idle span in which the other
server held the device. A burst is timed from the moment it is due to the end of its
synchronization: waiting for the lock and for memory to come back lands in it.

Memory moves at MOVE_GBPS (FAKECUDA_MIGRATE_GBPS), by the driver's migration, whose time the
fake takes from the bytes it really moves. The same bursts with no libnvs.so on a device that
holds both servers are the reference.
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "libnvs"))
from libnvs_programs import FakeGpu  # noqa: E402
from notebooks_fake import moves, ready_file, run_cells  # noqa: E402
from scheduler_log import lock_events, switch_moves  # noqa: E402
from scheduler_process import SchedulerProcess  # noqa: E402

MIB = 1 << 20


@dataclass(frozen=True)
class Servers:
    servers: int = 2
    device_mib: int = 1024
    share: float = 0.9          # of what cuMemGetInfo reports, as vLLM's gpu_memory_utilization
    touched: float = 0.1        # of each server's memory: its weights, written at start
    period_s: float = 2.0       # between one server's burst and the next server's
    requests: int = 5           # bursts per server
    launches: int = 20
    kernel_us: int = 1000
    move_gbps: float = 1.0
    tq: int = 10
    # Started one after the other this far apart, the last first, and serving from this long
    # after all are up (None: each from its own start on), as servers are started, then used.
    start_gap_s: float = 0.0
    settle_s: float | None = None

    @property
    def server_mib(self) -> int:
        return int(self.device_mib * self.share)

    @property
    def weights_mib(self) -> int:
        return int(self.server_mib * self.touched)

    @property
    def touched_bytes(self) -> int:
        return self.weights_mib * MIB

    def touched_move_s(self) -> float:
        """How long what a burst touched takes to come back at the link's rate."""
        return self.touched_bytes / (self.move_gbps * 1e9)

    def steps(self, index: int, go: Path) -> list:
        cycle_ms = round(self.period_s * 1000 * self.servers)
        burst = ["every-ms", cycle_ms, "clock", "fill", "weights", 1 + index,
                 "launches", self.launches, self.kernel_us, "stream-sync", "clock"]
        later_ms = round((self.servers - 1 - index) * self.start_gap_s * 1000)
        return ["sleep-ms", later_ms, "init", "alloc", "weights", f"{self.weights_mib}M",
                "alloc", "cache", f"{self.server_mib - self.weights_mib}M", "memset", "cache", 0,
                "fill", "weights", 1 + index, "stream-sync", "touch-file", ready_file(go, index),
                "wait-file", go,
                "sleep-ms", round(index * self.period_s * 1000), *burst * self.requests,
                "check", "weights", 1 + index]


# Each server's first two bursts are the warm-up: the first follows no idle span, and the second
# (the first server's) waits for the other's first move out, which carries its whole cleared
# cache, there since start, once.
WARM_UP = 2


def summary(bursts: list[list[float]]) -> dict:
    every = sorted(burst for server in bursts for burst in server)
    after_idle = sorted(burst for server in bursts for burst in server[WARM_UP:])
    return {"burst_median_s": statistics.median(every), "burst_max_s": every[-1],
            "after_idle_max_s": after_idle[-1] if after_idle else None,
            "bursts": len(every)}


def run_servers(gpu: FakeGpu, setup: Servers, preload: bool, env: dict) -> list[list[float]]:
    return run_cells(gpu, setup.steps, setup.servers, setup.requests, preload, env, "a server",
                     setup.settle_s)


def room_for_all(setup: Servers) -> int:
    """MiB of a device that holds every server's memory: the ideal, and where they fit."""
    return setup.servers * setup.server_mib + 256


def alone(directory: Path, setup: Servers) -> dict:
    directory.mkdir(parents=True)
    gpu = FakeGpu(directory, directory / "no-scheduler.sock", f"{room_for_all(setup)}M")
    try:
        return summary(run_servers(gpu, setup, False, {}))
    finally:
        gpu.stop_all()


def shared(directory: Path, setup: Servers, mode: str = "on", env: dict | None = None,
           device_mib: int | None = None) -> dict:
    """The servers under libnvs.so with a scheduler of their own in `mode`, on a device of
    `device_mib` (by default the one they size themselves to); what moved per switch, from the
    scheduler's log."""
    directory.mkdir(parents=True)
    scheduler = SchedulerProcess(directory, anti_thrash=mode, tq=setup.tq)
    gpu = FakeGpu(directory, scheduler.socket, f"{device_mib or setup.device_mib}M")
    env = {"GEMSHARE_MOVE_COPY": "0", "FAKECUDA_MIGRATE_GBPS": str(setup.move_gbps),
           **(env or {})}
    start = time.monotonic()
    try:
        bursts = run_servers(gpu, setup, True, env)
        scheduler.check_running()
    finally:
        gpu.stop_all()
        scheduler.stop()
    log = scheduler.log_path.read_text()
    switches = switch_moves(log, setup.servers)
    return {**summary(bursts), "per_server": bursts, "seconds": time.monotonic() - start,
            **lock_events(log), "moved": moves(log), "switch_bytes": switches,
            "switch_max_bytes": max(switches, default=None), "log": log}


def measure(directory: Path, setup: Servers, mode: str = "on") -> dict:
    result = {"setup": asdict(setup), "alone": alone(directory / "alone", setup)}
    result[mode] = shared(directory / mode, setup, mode)
    return result


def print_servers(result: dict, mode: str = "on") -> None:
    setup = Servers(**result["setup"])
    print(f"llm servers (fake driver): {setup.servers} x {setup.server_mib} MiB on "
          f"{setup.device_mib} MiB, {setup.weights_mib} MiB touched each, a burst every "
          f"{setup.period_s * setup.servers:g} s each, moves at {setup.move_gbps:g} GB/s "
          f"(touched part: {setup.touched_move_s():.3f} s)")
    for name in ("alone", mode):
        run = result[name]
        line = (f"  {name}: burst median {run['burst_median_s']:.3f} s, slowest "
                f"{run['burst_max_s']:.3f} s")
        if "moved" in run:
            most = run["switch_max_bytes"]
            line += (f", slowest after warm-up {run['after_idle_max_s']:.3f} s; {run['grants']} "
                     f"grants; moved {run['moved']['to_host']['mib']} MiB out, "
                     f"{run['moved']['to_device']['mib']} MiB in; after warm-up "
                     f"{len(run['switch_bytes'])} switches, the largest "
                     f"{'-' if most is None else f'{most / MIB:.0f} MiB'}")
        print(line)


if __name__ == "__main__":
    import tempfile
    with tempfile.TemporaryDirectory(prefix="llm-fake-", dir="/tmp") as where:
        found = measure(Path(where), Servers())
        print_servers(found)
        if "-v" in sys.argv:
            print(found["on"]["log"][-8000:])
