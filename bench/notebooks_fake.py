"""Notebooks whose memory does not fit together, on the fake driver, through the real scheduler
and the real libnvs.so: how long each cell takes when several mostly idle programs share a device
that holds only some of their memory.

N stand-ins of PROGRAM_MIB each on a DEVICE_MIB device, started START_GAP_S apart, each running
a cell every PERIOD_S: LAUNCHES kernels of KERNEL_US and a synchronization, timed from the
moment the cell is due (the program's own clock) to the end of its synchronization, so that
waiting for the lock and for memory brought back land in it. Memory moves at MOVE_GBPS
(FAKECUDA_MIGRATE_GBPS). The same cells alone (no libnvs.so: on the fake driver programs never
compete) are the reference.

Used by `make bench-cpu` (`notebooks_fake_*`) and by tests/libnvs/test_notebooks.py, which
holds the scheduler to the bounds of docs/scheduling.md ("Notebooks").
"""

from __future__ import annotations

import re
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "libnvs"))
from libnvs_programs import FakeGpu, wait_for  # noqa: E402
from scheduler_log import lock_events  # noqa: E402
from scheduler_process import SchedulerProcess  # noqa: E402

RUN_TIMEOUT_S = 300
CLOCK = re.compile(r"^clock ns=(\d+)$", re.M)
MOVED = re.compile(r"\bmoved client \d+ .*?: device \d+, (\d+) bytes to the (host|device) "
                   r"in ([0-9.]+) s")


@dataclass(frozen=True)
class Notebooks:
    programs: int = 4
    program_mib: int = 1400
    device_mib: int = 6144
    period_s: float = 2.0
    cells: int = 8
    launches: int = 100
    kernel_us: int = 1000
    start_gap_s: float = 0.5
    move_gbps: float = 4.0
    tq: int = 10

    def steps(self, index: int, go: Path) -> list:
        cell = ["every-ms", round(self.period_s * 1000), "clock",
                "launches", self.launches, self.kernel_us, "stream-sync", "clock"]
        return ["init", "alloc", "a", f"{self.program_mib}M", "wait-file", go,
                "sleep-ms", round(index * self.start_gap_s * 1000), *cell * self.cells]


def cell_seconds(output: str) -> list[float]:
    """Each cell's time, from the program's pairs of clock lines."""
    stamps = [int(ns) for ns in CLOCK.findall(output)]
    return [(end - start) / 1e9 for start, end in zip(stamps[::2], stamps[1::2])]


def ready_file(go: Path, index: int) -> Path:
    """The file stand-in `index` touches once it is ready, where run_cells waits for them."""
    return go.with_name(f"ready-{index}")


def run_cells(gpu: FakeGpu, steps_of, programs: int, cells: int, preload: bool, env: dict,
              what: str = "a stand-in", settle_s: float | None = None) -> list[list[float]]:
    """`programs` stand-ins, `steps_of(index, go_file)` each, from one start signal; each one's
    cell times, all `cells` of them or an error with its last words. The signal comes at once
    or, with `settle_s`, that long after every stand-in touched its ready_file."""
    go = gpu.path("go")
    go.unlink(missing_ok=True)
    for index in range(programs):
        ready_file(go, index).unlink(missing_ok=True)
    started = [gpu.start(steps_of(index, go), preload=preload, env=env)
               for index in range(programs)]
    if settle_s is not None:
        wait_for(lambda: all(ready_file(go, index).exists() for index in range(programs)),
                 f"the ready files of {programs} stand-ins", RUN_TIMEOUT_S)
        time.sleep(settle_s)
    go.touch()
    times = []
    for program in started:
        result = program.wait(RUN_TIMEOUT_S)
        if result.returncode != 0:
            raise RuntimeError(f"{what} failed:\n{result.describe()[-4000:]}")
        times.append(cell_seconds(result.stdout))
        if len(times[-1]) != cells:
            raise RuntimeError(f"{what} ran {len(times[-1])} of its {cells} cells:\n"
                               f"{result.describe()[-4000:]}")
    return times


def run_programs(gpu: FakeGpu, setup: Notebooks, preload: bool, env: dict) -> list[list[float]]:
    """Every program from one start signal; each one's cell times."""
    return run_cells(gpu, setup.steps, setup.programs, setup.cells, preload, env)


def summary(cells: list[list[float]]) -> dict:
    every = sorted(cell for program in cells for cell in program)
    return {"cell_median_s": statistics.median(every),
            "cell_p95_s": every[min(len(every) - 1, round(0.95 * (len(every) - 1)))],
            "cell_max_s": every[-1],
            "per_program": [{"median_s": statistics.median(program), "max_s": max(program)}
                            for program in cells]}


def moves(log: str) -> dict:
    sizes: dict[str, list[int]] = {"host": [], "device": []}
    for size, where, _ in MOVED.findall(log):
        sizes[where].append(int(size))
    return {f"to_{where}": {"count": len(found), "mib": round(sum(found) / (1 << 20))}
            for where, found in sizes.items()}


def alone(directory: Path, setup: Notebooks) -> dict:
    directory.mkdir(parents=True)
    # The ideal: a device that holds them all.
    room = setup.programs * setup.program_mib + 1024
    gpu = FakeGpu(directory, directory / "no-scheduler.sock", f"{room}M")
    try:
        return summary(run_programs(gpu, setup, False, {}))
    finally:
        gpu.stop_all()


def shared(directory: Path, setup: Notebooks, mode: str, args=()) -> dict:
    """The programs under libnvs.so with a scheduler of their own in `mode`."""
    directory.mkdir(parents=True)
    scheduler = SchedulerProcess(directory, anti_thrash=mode, tq=setup.tq, args=args)
    gpu = FakeGpu(directory, scheduler.socket, f"{setup.device_mib}M")
    # Moves by the driver's migration, whose time the fake takes from the rate.
    env = {"GEMSHARE_MOVE_COPY": "0", "GEMSHARE_POPULATE": "0",
           "FAKECUDA_MIGRATE_GBPS": str(setup.move_gbps)}
    start = time.monotonic()
    try:
        cells = run_programs(gpu, setup, True, env)
        scheduler.check_running()
    finally:
        gpu.stop_all()
        scheduler.stop()
    log = scheduler.log_path.read_text()
    return {**summary(cells), "seconds": time.monotonic() - start, **lock_events(log),
            "moved": moves(log)}


# The four notebooks (two fit together in `auto`), and a tighter device where only 2.6
# of the 4 fit even one at a time, so that every cell moves memory, as on the GPU bench.
SETUPS = {"standard": Notebooks(), "tight": Notebooks(device_mib=4096)}


def measure(directory: Path, setup: Notebooks, modes=("on", "auto")) -> dict:
    result = {"setup": asdict(setup), "alone": alone(directory / "alone", setup)}
    for mode in modes:
        result[mode] = shared(directory / mode, setup, mode)
    return result


def print_notebooks(name: str, result: dict) -> None:
    setup = result["setup"]
    print(f"notebooks, {name} (fake driver): {setup['programs']} x {setup['program_mib']} MiB on "
          f"{setup['device_mib']} MiB, a cell of {setup['launches']} x {setup['kernel_us']} us "
          f"every {setup['period_s']:g} s, {setup['cells']} cells, moves at "
          f"{setup['move_gbps']:g} GB/s")
    for name in ("alone", "on", "auto"):
        run = result.get(name)
        if run is None:
            continue
        line = (f"  {name}: cell median {run['cell_median_s']:.3f} s, p95 "
                f"{run['cell_p95_s']:.3f} s, slowest {run['cell_max_s']:.3f} s")
        if "grants" in run:
            moved = run["moved"]
            line += (f"; {run['grants']} grants, {run['drops']} drops, "
                     f"{run['early_releases']} early releases; moved "
                     f"{moved['to_host']['mib']} MiB out, {moved['to_device']['mib']} MiB in")
        print(line)


