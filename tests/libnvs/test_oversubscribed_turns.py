"""Two programs that do not fit on the device together, with libnvs.so and the real scheduler on
the fake driver, whose migrations take time (FAKECUDA_MIGRATE_GBPS): each handoff moves out only
the room the next one needs, and what moved out comes back before the program runs again."""

from __future__ import annotations

import re

from libnvs_programs import run_together

GIB = 1 << 30
KERNEL_US = 100_000
# 10 + 10 GiB and one 512 MiB context reserve on a 16 GiB device: 4.5 GiB over, plus the margin
# of 1/64 of the device (256 MiB).
ROOM = 4 * GIB + (768 << 20)


def moves(log: str, pid: int, where: str) -> list[int]:
    return [int(n) for n in re.findall(
        rf"moved client \d+ \(pid {pid},[^\n]*?\): device \d+, (\d+) bytes to the {where}", log)]


def test_handoffs_move_only_the_room_needed_and_bring_it_back(gpu_with_migrating):
    gpu, scheduler = gpu_with_migrating(device_mem="16G", tq=1)
    results = run_together(gpu, ["alloc", "a", "10G", *["launch", KERNEL_US, "stream-sync"] * 20],
                           env={"FAKECUDA_MIGRATE_GBPS": "40"})
    log = scheduler.log()
    asked = [int(n) << 20 for n in re.findall(r"\bdrop client [^\n]*evict (\d+) MiB", log)]
    assert asked and set(asked) == {ROOM}, log
    out_total = 0
    for result in results:
        out, back = moves(log, result.pid, "host"), moves(log, result.pid, "device")
        assert all(moved <= ROOM + (2 << 20) for moved in out), log  # 2 MiB pages
        # Each moved something, but a drop that raced the program's exit: its memory was gone.
        assert all(moved > 0 for moved in out[:-1]), log
        # Every move out but one that ended the program's last turn came back in bulk.
        assert len(back) >= len(out) - 1, log
        out_total += len(out)
    assert out_total >= 2 and "revoke" not in log, log
