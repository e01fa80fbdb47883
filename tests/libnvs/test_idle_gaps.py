"""Programs that do not fit on the device together fill each other's idle gaps when a handoff and
the way back cost less than the gap, with libnvs.so and the real scheduler on the fake driver,
whose migrations take time (FAKECUDA_MIGRATE_GBPS). Two programs of 1,800 MiB on a 4,096 MiB
device: each handoff moves out 272 MiB (and one context reserve and the margin), so a loan of a
gap and the way back move 4 x 272 MiB: 0.29 s at 4 GB/s, 2.3 s at 0.5 GB/s. What the scheduler
decided is read from its log and status; how much time it saved is bench/gap_pair.py's."""

from __future__ import annotations

import re

import libnvs_fakelog as fakelog
from libnvs_programs import client_of, run_together, scheduler_status, wait_file

PASS_US = 250_000


def gapped(passes: int, gap_ms: int = 1000) -> list:
    return ["launch", PASS_US, "stream-sync", "sleep-ms", gap_ms] * passes


def busy(passes: int, kernel_us: int = PASS_US) -> list:
    return ["launch", kernel_us, "stream-sync"] * passes


def lock_lines(log: str) -> list[str]:
    return re.findall(r"\b(?:request|grant|drop|release|lend|disconnect) client [^\n]*", log)


def pid_of(line: str) -> int:
    return int(re.search(r"\(pid (\d+),", line).group(1))


def memory_back_before_every_kernel(gpu, results) -> None:
    events = gpu.events()
    for result in results:
        assert fakelog.prefetches(events, result.pid, to_host=True), "nothing ever moved out"
        counts = fakelog.host_pages_at_kernels(events, result.pid)
        assert counts and set(counts) == {0}, (result.pid, counts)


def alone_then_together(gpu, alone: list, first: list, second: list, gbps: str) -> tuple:
    """A program of 1,800 MiB runs `alone`, then a pass of work, during which (holding the
    device) another of 1,800 MiB starts `second`, then `first`: their results, each of which
    must have succeeded, and the first one's gap estimate once it had run alone (seconds)."""
    env = {"FAKECUDA_MIGRATE_GBPS": gbps}
    learned, ready, go, runs = (gpu.path(name) for name in ("learned", "ready", "go", "runs"))
    one = gpu.start(["init", "alloc", "a", "1800M", *alone, "touch-file", learned,
                     "wait-file", go, "launch", PASS_US, "touch-file", runs, "stream-sync",
                     *first], env=env)
    wait_file(learned)
    gaps = client_of(scheduler_status(gpu.socket), one.pid)["gaps_s"]
    other = gpu.start(["init", "alloc", "b", "1800M", "touch-file", ready, "wait-file", go,
                       "wait-file", runs, *second], env=env)
    wait_file(ready)
    go.touch()
    results = [program.wait() for program in (one, other)]
    for result in results:
        assert result.returncode == 0, result.describe()
    return results, gaps.get("0", 0.0)


def test_a_pair_fills_each_others_gaps_when_moves_cost_less_than_a_gap(gpu_with_migrating):
    gpu, scheduler = gpu_with_migrating(device_mem="4G", tq=10)
    results = run_together(gpu, ["alloc", "a", "1800M", *gapped(8)],
                           env={"FAKECUDA_MIGRATE_GBPS": "4"})
    log = scheduler.log()
    loans = re.findall(r"\bgrant client [^\n]*, in the idle gap of client", log)
    assert len(loans) >= 3, log
    lenders = {pid_of(line) for line in re.findall(r"\blend client [^\n]*", log)}
    assert lenders and lenders <= {result.pid for result in results}, log
    assert "revoke" not in log, log
    # The device went from one to the other at the gaps, not at quantum ends only.
    switches = fakelog.switches(gpu.events(), {result.pid for result in results})
    assert switches >= 8, (switches, log)
    memory_back_before_every_kernel(gpu, results)


def test_a_pair_keeps_its_turns_when_moves_cost_more_than_a_gap(gpu_with_migrating):
    """0.5 s gaps beside 500 MB/s moves (a loan and the way back: 2.3 s). The first program runs
    alone first, so its gaps are known; both then run without gaps for a few quanta, so the
    moves have shown the link's rate before the gaps come. The second program's first gap is
    never seen before it comes, and is lent (nobody waits behind an idle holder for want of
    knowing it); from then on neither lends."""
    gpu, scheduler = gpu_with_migrating(device_mem="4G", tq=1)
    (first, second), gaps = alone_then_together(gpu, gapped(3, 500), [*busy(5), *gapped(4, 500)],
                                                [*busy(6), *gapped(4, 500)], gbps="0.5")
    assert 0.4 < gaps < 1.0, gaps
    results = [first, second]
    log = scheduler.log()
    lenders = [int(pid) for pid in re.findall(r"lend client \d+ \(pid (\d+),", log)]
    assert lenders in ([], [second.pid]), log
    # While both run, every other hold ends by a drop: nobody lets go at a gap.
    start = re.search(rf"request client \d+ \(pid {second.pid},", log).start()
    together = log[start:log.index("disconnect client")]
    releases = re.findall(r"release client [^\n]*: device 0 ([^,\n]*),", together)
    assert releases.count("early (idle)") == len(lenders), log
    assert releases.count("after drop") >= 4, log
    memory_back_before_every_kernel(gpu, results)


def test_a_lender_whose_gaps_stop_gets_the_device_back_within_a_move(gpu_with_migrating):
    """A program with 1 s gaps lends them to a busy one; then its gaps stop. Each time it comes
    back, the busy one drops at once (moving out 272 MiB: 0.07 s at 4 GB/s) and the lender runs
    the rest of its turn of 30 s, which outlasts the test. A minimum slice past the test, so
    that the newcomer, under its share, does not cut the lender's turn short."""
    gpu, scheduler = gpu_with_migrating(device_mem="4G", tq=30, min_slice_ms=5000)
    (lender, borrower), gaps = alone_then_together(gpu, gapped(3),
                                                   ["sleep-ms", 1000, *gapped(2), *busy(8)],
                                                   busy(60, 100_000), gbps="4")
    assert gaps > 0.5, gaps
    results = [lender, borrower]
    log = scheduler.log()
    lines = lock_lines(log)
    loans = [line for line in lines if line.startswith("grant") and "in the idle gap of" in line]
    assert len(loans) >= 2 and {pid_of(line) for line in loans} == {borrower.pid}, log
    # Each gap lent (a grant right after the lend) ends with the lender back; a borrower that a
    # starved CPU kept from submitting may let go and be granted again within the same gap.
    lent = [line for before, line in zip(lines, lines[1:])
            if before.startswith("lend") and line in loans]
    backs = [i for i, line in enumerate(lines) if line.startswith("request")
             and pid_of(line) == lender.pid and "back from its idle gap" in line]
    assert len(backs) == len(lent) >= 2, log
    for i in backs:
        # The borrower, busy, never lets go by itself: it is dropped at once, and the lender
        # is the next one granted.
        after = lines[i + 1:]
        assert after[0].startswith("drop") and pid_of(after[0]) == borrower.pid, after[:3]
        assert after[0].endswith("is back from its idle gap, evict 272 MiB to the host; "
                                 "dropped: the lender is back from its gap [gaps]"), after[0]
        grant = next(line for line in after if line.startswith("grant"))
        assert pid_of(grant) == lender.pid and "back from its idle gap" in grant, after[:4]
        waited = float(re.search(r"after waiting ([\d.]+) s", grant).group(1))
        assert waited < 10, grant  # one drain and one move, not the borrower's turn of 30 s
    # Its last return was for good: it kept the device, busy, until it left.
    last = lines[backs[-1]:]
    end = next(i for i, line in enumerate(last) if line.startswith("disconnect")
               and pid_of(line) == lender.pid)
    assert not [line for line in last[:end] if "early (idle)" in line or
                line.startswith("grant") and pid_of(line) == borrower.pid], last[:end]
    memory_back_before_every_kernel(gpu, results)
