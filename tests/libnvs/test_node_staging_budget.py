"""The node's staging budget (--staging-max-mib; core/rules/memory/staging_budget.py), with libnvs.so and
the real scheduler on the fake driver: three programs of 32 MiB on a 64 MiB device each run once
and then wait, idle, while the others may need the device. Without the budget each idle program
is told to prepare its whole share of the overflow and pins it ahead; with a budget of 16 MiB
they are told 16 MiB at most all together, and none of them hears more. Their memory stays
intact either way. (libnvs pins what it was told and one move's piece, 256 MiB, more: at these
sizes that is all of it.)"""

from __future__ import annotations

import re

import pytest
from libnvs_programs import scheduler_status, wait_for

MIB = 1 << 20
PROGRAMS = 3
BUDGET_MIB = 16
HEARD = re.compile(r"idle hint \d+ ms for device 0, (\d+) bytes to move out")


def run_idle_programs(gpu, scheduler):
    """The programs, each allocated, run once and idle; the status once all were told."""
    leave = gpu.path("leave")
    programs = [gpu.start(["init", "alloc", "a", "32M", "write", "a", 17 + i, "launch", 1000,
                           "stream-sync", "touch-file", gpu.path(f"ran-{i}"), "wait-file", leave,
                           "check", "a", 17 + i], env={"GEMSHARE_DEBUG": "1"})
                for i in range(PROGRAMS)]
    for i in range(PROGRAMS):
        wait_for(lambda: gpu.path(f"ran-{i}").exists(), f"program {i} to run once")

    def told_the_idle():
        status = scheduler_status(scheduler.socket)
        told = [c["staging_bytes"].get("0", 0) for c in status["clients"]]
        return status if len(told) == PROGRAMS and sum(1 for t in told if t) >= 2 else None

    status = wait_for(told_the_idle, "the idle programs told what to prepare")
    leave.touch()
    results = [program.wait() for program in programs]
    for result in results:
        assert result.returncode == 0, result.describe()
        assert [c["ok"] for c in result.steps("check")] == ["1"], result.describe()
    return status, results


def figures_heard(result) -> list[int]:
    """Every figure of staging memory to prepare the program heard, by its own account."""
    return [int(m[1]) for line in result.gemshare_lines() if (m := HEARD.search(line))]


@pytest.mark.parametrize("budget_mib", [None, BUDGET_MIB], ids=["no-budget", "budget"])
def test_what_idle_programs_prepare_stays_within_the_nodes_staging_budget(gpu_with, budget_mib):
    gpu, scheduler = gpu_with(device_mem="64M", tq=10, context_reserve_mib=0,
                              staging_max_mib=budget_mib)
    status, results = run_idle_programs(gpu, scheduler)
    staging = status["staging"]
    told = [c["staging_bytes"].get("0", 0) for c in status["clients"]]
    assert staging["told_bytes"] == sum(told)
    if budget_mib is None:  # the case the budget is for: they want more than it
        assert staging["limit_bytes"] is None and staging["fraction"] == 1
        assert sum(told) > BUDGET_MIB * MIB
        return
    assert staging["limit_bytes"] == budget_mib * MIB
    assert staging["wanted_bytes"] > budget_mib * MIB and staging["fraction"] < 1
    assert 0 < sum(told) <= budget_mib * MIB
    # What the programs heard: never more than the budget, from the first hint on.
    heard = [figures_heard(result) for result in results]
    assert all(heard) and max(max(figures) for figures in heard) <= budget_mib * MIB, heard
