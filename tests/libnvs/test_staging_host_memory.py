"""Host memory that staging takes (libnvs/README.md, "Host memory for staging has a budget"):
within GEMSHARE_STAGING_MAX_MIB, within what the memory cgroup and the host have free (read
before a page is faulted in), for what the scheduler expects to overflow the device rather than
every program's whole memory, given back when no longer needed, and the driver's migration,
with one warning, where staging would not fit. Programs that run under a memory limit without
staging run under it with staging too.

Four programs of 96 MiB (four buffers of 24 MiB: a move's pieces are no larger) take turns on a
160 MiB fake device (a 1 s quantum), checking their bytes after every turn. On the fake, managed
memory is host memory, so a program's RSS is its allocation and the libraries whatever the
moves do, and staging memory comes on top of it."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest
from gemshare_nvs import protocol as p

import libnvs_fakelog as fakelog
from libnvs_programs import FakeGpu, Result, wait_for
from test_move_by_copy import CHECKED, WRITTEN
from test_move_out import dropped, start_holding

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))  # shared with the bench
import memory_cgroup  # noqa: E402

MiB = 1 << 20
PROGRAMS = 4
BUFFERS = "abcd"
PIECE = "24M"
DEVICE = "160M"
TURNS = 6
NO_STAGING = {"GEMSHARE_MOVE_COPY": "0"}
# What libnvs keeps free below a limit for the programs' own growth (host_room.h, GS_HOST_FLOOR).
FLOOR = 128 * MiB


def sizes(gpu: FakeGpu, event: str, pid: int) -> list[int]:
    """The sizes of the process's fake-driver events of that name (host_register: pins), in
    order."""
    return [int(e["size"]) for e in fakelog.named(gpu.events(), event, pid=pid)]


def pinned_ahead(gpu: FakeGpu, scheduler, holder, ran: Path, bytes: int) -> list[int]:
    """Gives `holder` a turn until it touches `ran`, tells it that `bytes` may have to leave, and
    waits until it pinned staging memory for all of it ahead; the pins' sizes."""
    scheduler.turn(holder, ran)
    scheduler.send(holder.pid, p.IdleHint(0, 0, bytes))
    wait_for(lambda: sum(sizes(gpu, "host_register", holder.pid)) >= bytes,
             "staging memory pinned ahead")
    return sizes(gpu, "host_register", holder.pid)


def peak_rss(pid: int) -> int:
    """The most resident memory the process has had (VmHWM)."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^VmHWM:\s+(\d+) kB", status, re.M).group(1)) * 1024


def take_turns(gpu: FakeGpu, env: dict, group: memory_cgroup.MemoryCgroup | None = None,
               run: str = "") -> tuple[list[Result], list[int]]:
    """The four programs, started together (in `group` when given); their results and each one's
    peak RSS, read once it has done its turns."""
    go, leave = gpu.path(f"go{run}"), gpu.path(f"leave{run}")
    programs = []
    for i in range(PROGRAMS):
        allocate = [step for b in BUFFERS for step in ("alloc", b, PIECE, "write", b, 17 + i)]
        check = [step for b in BUFFERS for step in ("check", b, 17 + i)]
        steps = ["init", *allocate, "touch-file", gpu.path(f"ready{run}-{i}"), "wait-file", go,
                 *["launch", 100_000, *check] * TURNS,
                 "touch-file", gpu.path(f"done{run}-{i}"), "wait-file", leave]
        command = gpu.command(steps)
        programs.append(gpu.start([], env=env, command=group.wrap(command) if group else command))
    for i, program in enumerate(programs):
        ready = gpu.path(f"ready{run}-{i}")
        wait_for(lambda: ready.exists() or program.process.poll() is not None,
                 f"program {i} to allocate", timeout=60)
    go.touch()
    peaks = []
    for i, program in enumerate(programs):
        done = gpu.path(f"done{run}-{i}")
        # Until it has done its turns, or ended without (killed): its result says which.
        wait_for(lambda: done.exists() or program.process.poll() is not None,
                 f"program {i} to do its turns", timeout=120)
        peaks.append(peak_rss(program.pid) if program.process.poll() is None else 0)
    leave.touch()
    return [program.wait() for program in programs], peaks


def all_intact(results: list[Result]) -> None:
    for result in results:
        assert result.returncode == 0, result.describe()
        checks = [c["ok"] for c in result.steps("check")]
        assert checks == ["1"] * TURNS * len(BUFFERS), result.describe()


@pytest.fixture
def cgroup():
    group, why = memory_cgroup.create()
    if group is None:
        pytest.skip(why)
    yield group
    group.remove()


@pytest.fixture
def second_cgroup(cgroup):
    group, why = memory_cgroup.create()
    if group is None:
        pytest.skip(why)
    yield group
    group.remove()


def test_staging_stays_within_its_budget_and_the_moves_keep_every_byte(gpu_with):
    gpu, scheduler = gpu_with(device_mem=DEVICE, tq=1, context_reserve_mib=1)
    baseline, without = take_turns(gpu, NO_STAGING, run="plain")
    all_intact(baseline)
    budget = 32
    results, with_budget = take_turns(gpu, {"GEMSHARE_STAGING_MAX_MIB": str(budget)},
                                      run="budget")
    all_intact(results)
    events = gpu.events()
    for result, peak in zip(results, with_budget):
        pinned = sum(int(e["size"]) for e in fakelog.named(events, "host_register",
                                                           pid=result.pid))
        assert pinned <= budget * MiB, result.describe()
        # Its memory, the libraries, and at most the budget (room for page tables and the fake's
        # own bookkeeping: a tenth of the budget).
        assert peak <= max(without) + budget * MiB * 11 // 10, (peak, without)
    assert any(fakelog.discarded(events, r.pid) for r in results), "nothing went by copy"
    warned = [line for r in results for line in r.gemshare_lines()
              if "GEMSHARE_STAGING_MAX_MIB=32" in line]
    assert warned and all(len([line for line in r.gemshare_lines()
                               if "staging memory for moves off" in line]) <= 1
                          for r in results), warned


def test_programs_that_fit_a_memory_limit_without_staging_fit_it_with_staging(
        gpu_with, cgroup, second_cgroup):
    """Without staging the four programs peak at some P in their cgroup; under a limit of P, the
    floor libnvs keeps, and 48 MiB (less than one program's whole memory, which staging used to
    pin for each), they all finish with staging, every byte intact, nobody killed; what did not
    fit in staging memory went by the driver's migration, and each program that fell back said
    so once."""
    gpu, scheduler = gpu_with(device_mem=DEVICE, tq=1, context_reserve_mib=1)
    baseline, _ = take_turns(gpu, NO_STAGING, cgroup, run="plain")
    all_intact(baseline)
    limit = cgroup.peak() + FLOOR + 48 * MiB
    second_cgroup.limit(limit)
    results, _ = take_turns(gpu, {"GEMSHARE_DEBUG": "1"}, second_cgroup, run="limited")
    staging = [f"{r.pid}: {line}" for r in results for line in r.gemshare_lines()
               if "staging" in line or "faulted in" in line]
    assert second_cgroup.oom_kills() == 0, (limit, [r.returncode for r in results],
                                            "\n".join(staging))
    all_intact(results)
    assert second_cgroup.peak() <= limit
    short = [line for r in results for line in r.gemshare_lines()
             if "host memory is short for staging" in line and "memory cgroup limit" in line]
    assert short, "\n".join(results[0].gemshare_lines())
    assert all(len([line for line in r.gemshare_lines() if "is short for staging" in line]) <= 1
               for r in results)


def test_a_first_move_out_finds_staging_memory_prepared_since_the_allocation(gpu_with):
    """Two programs of 40 MiB on a 64 MiB device. Once the second has allocated, the first,
    which holds the device and works, is told what may have to leave it and prepares staging
    memory for that in the background; its first move out, 1.5 s later, copies into memory
    that was ready before the move: nothing is pinned while it moves. Pinning here takes 0.8 s
    (50 MB/s), so a move that had to wait for it would show."""
    gpu, scheduler = gpu_with(device_mem="64M", tq=10)
    env = {"FAKECUDA_PIN_GBPS": "0.05", "GEMSHARE_DEBUG": "1"}
    allocated = gpu.path("second-allocated")
    first = gpu.start(["init", "alloc", "a", "40M", "write", "a", 17, "launch", 1000,
                       "stream-sync", "wait-file", allocated, "launches", 15, 100_000,
                       "stream-sync", "sleep-ms", 1500, "check", "a", 17], env=env)
    second = gpu.start(["init", "alloc", "b", "40M", "touch-file", allocated,
                        "sleep-ms", 1500, "launch", 1000, "stream-sync"], env=env)
    for program in (first, second):
        result = program.wait()
        assert result.returncode == 0, result.describe()
    lines = first.result().gemshare_lines()
    moves = [re.search(r"by copy (\d+) bytes, (\d+) of them into staging memory ready before",
                       line) for line in lines if "of managed memory to the host" in line]
    moves = [(int(m.group(1)), int(m.group(2))) for m in moves if m]
    assert moves, "\n".join(lines)
    copied, ready = moves[0]
    assert copied > 0 and ready == copied, moves
    events = gpu.events()
    pins = fakelog.named(events, "host_register", pid=first.pid)
    first_move = min(e.ns for e in fakelog.moves_out(events, first.pid))
    assert pins and all(pin.ns < first_move for pin in pins)
    assert [c["ok"] for c in first.result().steps("check")] == ["1"]


def test_staging_memory_goes_back_to_the_host_once_nothing_may_have_to_leave(scripted):
    """Told that 7 MiB may have to leave, a program pins staging memory for it ahead; told then
    that nothing may (the others' memory fits now: _prepare_hints), it unpins and unmaps all of
    it. A move out later still goes by copy, into memory pinned for that move."""
    gpu, scheduler = scripted
    program = start_holding(gpu, scheduler, WRITTEN, then=CHECKED)
    scheduler.send(program.pid, p.IdleHint(0, 0, 7 * MiB))
    pinned = wait_for(lambda: fakelog.named(gpu.events(), "host_register", pid=program.pid),
                      "staging memory pinned ahead")
    scheduler.send(program.pid, p.IdleHint(0, 0, 0))
    given = wait_for(lambda: fakelog.named(gpu.events(), "host_unregister", pid=program.pid),
                     "staging memory given back")
    assert sum(int(e["size"]) for e in given) == sum(int(e["size"]) for e in pinned) >= 7 * MiB
    scheduler.drop(program.pid, p.EVICT_ALL)
    scheduler.wait_for(program.pid, p.LockReleased)
    result = scheduler.last_turn(program, gpu.path("again"))
    ptr = result.pointers()
    assert fakelog.discarded(gpu.events(), result.pid) == [(ptr["a"], 3 * MiB), (ptr["b"], 4 * MiB)]
    assert [c["ok"] for c in result.steps("check")] == ["1", "1"]


def test_a_budget_of_nothing_leaves_every_move_to_the_drivers_migration(scripted):
    gpu, scheduler = scripted
    result, events = dropped(gpu, scheduler, WRITTEN, evict_bytes=p.EVICT_ALL, then=CHECKED,
                             env={"GEMSHARE_STAGING_MAX_MIB": "0"})
    ptr = result.pointers()
    assert not fakelog.named(events, "host_register", pid=result.pid)
    assert not fakelog.discarded(events, result.pid)
    assert fakelog.prefetched(events, result.pid, to_host=True) == \
        [(ptr["a"], 3 * MiB), (ptr["m"], 2 * MiB), (ptr["b"], 4 * MiB)]
    assert [c["ok"] for c in result.steps("check")] == ["1", "1"]


# Another program's growth: 80 MiB of its own host memory, written, kept until `again` exists.
GROWER = """import pathlib, sys, time
grown = bytearray(80 << 20)
for at in range(0, len(grown), 4096):
    grown[at] = 1
pathlib.Path(sys.argv[1]).touch()
while not pathlib.Path(sys.argv[2]).exists():
    time.sleep(0.02)
"""


def test_an_unused_pool_goes_back_once_other_programs_eat_into_the_floor(scripted, cgroup):
    """A program holding 24 MiB of staging memory it does not use, in a memory cgroup that then
    has the floor libnvs keeps (and 8 MiB) free; another program in the group writes 80 MiB. The
    first gives its staging memory back (it would be what the OOM killer takes) while the other
    grows, and nobody is killed."""
    gpu, scheduler = scripted
    ran, again, grown = gpu.path("ran"), gpu.path("again"), gpu.path("grown")
    holder = gpu.start([], env={"GEMSHARE_IDLE_RELEASE_MS": "0"}, command=cgroup.wrap(
        gpu.command(["init", "alloc", "a", "24M", "write", "a", 17, "launch", 100, "sync",
                     "touch-file", ran, "wait-file", again, "check", "a", 17])))
    scheduler.turn(holder, ran)
    scheduler.send(holder.pid, p.IdleHint(0, 0, 24 * MiB))
    pinned = wait_for(lambda: fakelog.named(gpu.events(), "host_register", pid=holder.pid),
                      "staging memory pinned ahead")
    cgroup.limit(cgroup.used() + FLOOR + 8 * MiB)
    grower = gpu.start([], preload=False, command=cgroup.wrap(
        [sys.executable, "-c", GROWER, str(grown), str(again)]))
    given = wait_for(lambda: fakelog.named(gpu.events(), "host_unregister", pid=holder.pid),
                     "staging memory given back")
    assert sum(int(e["size"]) for e in given) == sum(int(e["size"]) for e in pinned)
    wait_for(lambda: grown.exists() or grower.process.poll() is not None, "the other to grow")
    again.touch()
    assert grower.wait().returncode == 0
    assert holder.wait().returncode == 0
    assert [c["ok"] for c in holder.result().steps("check")] == ["1"]
    assert cgroup.oom_kills() == 0


def test_staging_held_for_a_move_to_come_goes_back_where_the_host_has_no_room_for_another(
        scripted, cgroup):
    """A program holding 24 MiB of staging memory ahead for a move that has not come, in a memory
    cgroup that then keeps the floor libnvs leaves (and 8 MiB) free: no pressure yet, but no room
    for another move as large beside the pool, which another program's migration would need. It
    gives the pool back at once, whole, and prepares none again while the room stays that small;
    its bytes stay intact and nobody is killed. Before, the pool stayed until others' growth ate
    into the floor: on an H200 two programs under a limit they fit without staging lost one to
    the OOM killer while the holder kept its pool (docs/benchmarks.md, tenth run)."""
    gpu, scheduler = scripted
    ran, again = gpu.path("ran"), gpu.path("again")
    holder = gpu.start([], env={"GEMSHARE_IDLE_RELEASE_MS": "0"}, command=cgroup.wrap(
        gpu.command(["init", "alloc", "a", "24M", "write", "a", 17, "launch", 100, "sync",
                     "touch-file", ran, "wait-file", again, "check", "a", 17])))
    pinned = pinned_ahead(gpu, scheduler, holder, ran, 24 * MiB)
    cgroup.limit(cgroup.used() + FLOOR + 8 * MiB)
    given = wait_for(lambda: fakelog.named(gpu.events(), "host_unregister", pid=holder.pid),
                     "staging memory given back")
    assert sum(int(e["size"]) for e in given) == sum(pinned)
    scheduler.send(holder.pid, p.IdleHint(0, 0, 24 * MiB))  # told again: still no room
    time.sleep(1.0)  # 25 looks of the client thread at the host's room
    assert sizes(gpu, "host_register", holder.pid) == pinned  # nothing pinned again
    again.touch()
    assert holder.wait().returncode == 0
    assert [c["ok"] for c in holder.result().steps("check")] == ["1"]
    assert cgroup.oom_kills() == 0


def test_the_empty_blocks_of_a_pool_in_use_go_back_once_other_programs_eat_into_the_floor(
        scripted, cgroup):
    """A program of 600 MiB prepares staging memory for all of it (pinned in blocks of 256 MiB
    at the most), is asked to move only 200 MiB out, and waits off the device with those in its
    pool; in a memory cgroup that then has the floor libnvs keeps (and 8 MiB) free, another
    program writes 80 MiB. The first gives back the blocks its move did not fill, keeps the one
    that holds its bytes, and has all of them back intact at its next turn; nobody is killed.
    On a GPU the driver's migration of what a pool cannot take needs host memory: such blocks
    kept pinned had the OOM killer take both of two programs (docs/benchmarks.md, "Sixth
    run")."""
    gpu, scheduler = scripted
    buffers = [("a", 21), ("b", 22), ("c", 23)]
    ran, again, grown = gpu.path("ran"), gpu.path("again"), gpu.path("grown")
    allocate = [step for name, value in buffers for step in ("alloc", name, "200M", "write",
                                                              name, value)]
    check = [step for name, value in buffers for step in ("check", name, value)]
    holder = gpu.start([], env={"GEMSHARE_IDLE_RELEASE_MS": "0", "FAKECUDA_DEVICE_MEM": "1G"},
                       command=cgroup.wrap(gpu.command(
                           ["init", *allocate, "launch", 100, "sync", "touch-file", ran,
                            "wait-file", again, *check, "launch", 100, "sync"])))
    blocks = pinned_ahead(gpu, scheduler, holder, ran, 600 * MiB)
    assert len(blocks) > 1, blocks
    scheduler.drop(holder.pid, 200 * MiB)
    scheduler.wait_for(holder.pid, p.LockReleased)
    cgroup.limit(cgroup.used() + FLOOR + 8 * MiB)  # a sixteenth of the limit is below FLOOR
    grower = gpu.start([], preload=False, command=cgroup.wrap(
        [sys.executable, "-c", GROWER, str(grown), str(again)]))
    wait_for(lambda: fakelog.named(gpu.events(), "host_unregister", pid=holder.pid),
             "the empty blocks given back")
    wait_for(lambda: grown.exists() or grower.process.poll() is not None, "the other to grow")
    given = [int(e["size"]) for e in fakelog.named(gpu.events(), "host_unregister",
                                                   pid=holder.pid)]
    assert sum(given) == sum(blocks[1:]), (blocks, given)  # the first holds the 200 MiB
    result = scheduler.last_turn(holder, again)
    assert grower.wait().returncode == 0
    assert result.returncode == 0, result.describe()
    assert [c["ok"] for c in result.steps("check")] == ["1", "1", "1"]
    assert cgroup.oom_kills() == 0


def test_a_launch_asks_for_the_lock_while_staging_memory_is_still_being_pinned(scripted):
    """A program that let the lock go is told that 768 MiB of it may have to leave, and pins
    staging memory for that on a slow host (0.8 GB/s: 0.34 s for each 256 MiB piece, 1 s in
    all). Its next launch asks for the lock while the pins go on: the request leaves once the
    piece in progress is pinned, before the rest (it used to wait for the client thread to pin
    all it had faulted in). A launch, not the check's copy: the check first fills 768 MiB of
    host memory of its own, which takes as long as the pins."""
    gpu, scheduler = scripted
    gpu.device_mem = "1G"
    launch_at = gpu.path("launch-now")
    program = gpu.start(["init", "alloc", "a", "768M", "write", "a", 17, "launch", 100, "sync",
                         "touch-file", gpu.path("ran"), "wait-file", launch_at, "launch", 100,
                         "check", "a", 17],
                        env={"GEMSHARE_IDLE_RELEASE_MS": "0", "FAKECUDA_PIN_GBPS": "0.8"})
    scheduler.turn(program, gpu.path("ran"))
    scheduler.drop(program.pid, 0)
    scheduler.wait_for(program.pid, p.LockReleased)
    scheduler.send(program.pid, p.IdleHint(0, 0, 768 * MiB))
    first_pin = wait_for(lambda: fakelog.named(gpu.events(), "host_register", pid=program.pid),
                         "the first piece pinned")
    launch_at.touch()  # during the second piece's pin
    (asked_ns, _), = scheduler.wait_for(program.pid, p.RequestLock, count=2)[1:]
    scheduler.grant(program.pid, after_wait=True)
    result = program.wait()
    assert result.returncode == 0, result.describe()
    pins = sorted(e.ns for e in fakelog.named(gpu.events(), "host_register", pid=program.pid))
    # It asked after the launch (past the first piece) and while pieces were still to pin.
    assert pins[0] == first_pin[0].ns < asked_ns < pins[-1], (asked_ns, pins)
    assert [c["ok"] for c in result.steps("check")] == ["1"]
