"""What a program sees through NVML under libnvs.so: under the scheduler's memory limit, its own
view of the card (the limit as total; what it holds there plus what the others of its budget
hold as used), as cuMemGetInfo shows it; without one, the card as it is. NVML is reached by
dlopen and dlsym (the stand-in's NVML steps, pynvml through ctypes) or by linking it
(standin_linked), on the fake GPU's NVML library (tests/fakecuda/nvml_library.c: 64 MiB devices,
1 MiB of each reserved by the driver). A program that only asks NVML registers view-only to
learn its limit."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from gemshare_nvs import protocol as p

from libnvs_programs import wait_file

MIB = 1 << 20
DEVICE = 64 * MIB
RESERVED = 1 * MIB
READER = Path(__file__).resolve().parent / "pynvml_reader.py"
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_INIT = ["nvml-init"]


def memory(result) -> list[dict]:
    """Every nvml-memory step's numbers: {"version", "total", "free", "used"[, "reserved"]}."""
    return [{key: value if key == "version" else int(value) for key, value in step.items()
             if key in ("version", "total", "free", "used", "reserved")}
            for step in result.steps("nvml-memory")]


def v1(total: int, used: int) -> dict:
    return {"version": "1", "total": total, "used": used, "free": total - used}


def v2(total: int, used: int, reserved: int = 0) -> dict:
    return {"version": "2", "total": total, "reserved": reserved, "used": used,
            "free": total - reserved - used}


def read_with_pynvml(gpu, env: dict | None = None, command: list | None = None) -> dict:
    result = gpu.start([], command=command or [sys.executable, str(READER)], env=env).wait()
    assert result.returncode == 0, result.describe()
    return {**json.loads(result.stdout), "stderr": result.stderr, "pid": result.pid}


@pytest.mark.parametrize("resolve", ["procaddr", "linked"], ids=["dlsym", "linked"])
def test_a_limited_program_sees_its_limit_and_what_it_holds(scripted, resolve):
    gpu, scheduler = scripted
    scheduler.memory_limit = 16 * MIB
    result = gpu.run(["init", "alloc", "a", "4M", *NVML_INIT, "nvml-memory", 1, "nvml-memory", 2],
                     resolve=resolve)
    assert result.returncode == 0, result.describe()
    assert memory(result) == [v1(16 * MIB, 4 * MIB), v2(16 * MIB, 4 * MIB)]


def test_what_the_others_of_the_budget_hold_shows_as_used(scripted):
    gpu, scheduler = scripted
    scheduler.memory_limit = 16 * MIB
    scheduler.budget_used = 6 * MIB
    result = gpu.run(["init", "alloc", "a", "4M", *NVML_INIT, "nvml-memory", 1, "nvml-memory", 2,
                      "mem-info"])
    assert result.returncode == 0, result.describe()
    assert memory(result) == [v1(16 * MIB, 10 * MIB), v2(16 * MIB, 10 * MIB)]
    assert result.one("mem-info")["free"] == str(6 * MIB)  # as cuMemGetInfo says


def test_two_programs_of_one_budget_see_their_sum_as_used(scripted):
    gpu, scheduler = scripted
    scheduler.memory_limit = 32 * MIB
    programs = [gpu.start(["init", "alloc", "a", f"{mib}M", "touch-file", gpu.path(f"held-{mib}"),
                           "wait-file", gpu.path("told"), *NVML_INIT, "nvml-memory", 1])
                for mib in (4, 3)]
    for mib in (4, 3):
        wait_file(gpu.path(f"held-{mib}"))
    # What the scheduler tells each: the other's allocation.
    scheduler.limit(programs[0].pid, 32 * MIB, budget_used=3 * MIB)
    scheduler.limit(programs[1].pid, 32 * MIB, budget_used=4 * MIB)
    gpu.path("told").touch()
    for program in programs:
        result = program.wait()
        assert result.returncode == 0, result.describe()
        assert memory(result) == [v1(32 * MIB, 7 * MIB)]


def test_without_a_limit_the_card_is_shown_as_it_is(scripted):
    gpu, scheduler = scripted
    result = gpu.run(["init", "alloc", "a", "4M", *NVML_INIT, "nvml-memory", 1, "nvml-memory", 2])
    assert result.returncode == 0, result.describe()
    # The fake card's own numbers: the driver's reserve, and this program's 4 MiB.
    assert memory(result) == [v1(DEVICE, RESERVED + 4 * MIB), v2(DEVICE, 4 * MIB, RESERVED)]


def test_a_limit_past_the_card_shows_the_card_with_the_budget_as_used(scripted):
    gpu, scheduler = scripted
    scheduler.memory_limit = 1 << 40
    scheduler.budget_used = 2 * MIB
    result = gpu.run(["init", "alloc", "a", "4M", *NVML_INIT, "nvml-memory", 1, "nvml-memory", 2])
    assert result.returncode == 0, result.describe()
    assert memory(result) == [v1(DEVICE, 6 * MIB), v2(DEVICE, 6 * MIB, RESERVED)]


def test_a_wrong_struct_version_gets_nvml_s_own_error(scripted):
    gpu, scheduler = scripted
    scheduler.memory_limit = 16 * MIB
    result = gpu.run([*NVML_INIT, "nvml-memory", "2-bad"])
    assert result.one("nvml-memory")["result"] == str(NVML_ERROR_ARGUMENT_VERSION_MISMATCH), \
        result.describe()


def test_a_gpu_is_matched_by_its_uuid_not_its_index(scripted):
    gpu, scheduler = scripted
    scheduler.memory_limit = 16 * MIB
    # NVML numbers the two GPUs the other way round from CUDA: CUDA's device 1 is NVML's 0.
    result = gpu.run(["init", "device", 1, "alloc", "a", "4M", *NVML_INIT,
                      "nvml-device", 0, "nvml-memory", 1, "nvml-device", 1, "nvml-memory", 1,
                      "nvml-device-by-uuid", 0, "nvml-memory", 1],
                     env={"FAKECUDA_DEVICE_COUNT": "2", "FAKECUDA_NVML_REVERSED": "1"})
    assert result.returncode == 0, result.describe()
    assert memory(result) == [v1(16 * MIB, 4 * MIB), v1(16 * MIB, 0), v1(16 * MIB, 4 * MIB)]


PROCESSES = {"FAKECUDA_NVML_PROCESSES": "compute:self:999,compute:12:7,graphics:13:9,mps:self:5"}


def listed(step: dict) -> list[tuple[int, int]]:
    return [tuple(map(int, entry.split(":"))) for entry in step["processes"].split(";") if entry]


def test_under_a_limit_the_process_lists_show_the_program_alone(scripted):
    gpu, scheduler = scripted
    scheduler.memory_limit = 16 * MIB
    steps = ["init", "alloc", "a", "4M", *NVML_INIT,
             *[word for version in (1, 2, 3) for word in ("nvml-processes", "compute", version)],
             "nvml-processes", "graphics", 3, "nvml-processes", "mps", 2, "nvml-details", 3]
    result = gpu.run(steps, env=PROCESSES)
    assert result.returncode == 0, result.describe()
    me = (result.pid, 4 * MIB)  # with the memory libnvs counts, not the driver's 999 bytes
    *compute, graphics, mps = result.steps("nvml-processes")
    for step in compute + [mps]:
        # Asked with no room first: too small for the one entry, as NVML answers.
        assert (step["first"], step["needed"]) == (str(NVML_ERROR_INSUFFICIENT_SIZE), "1"), step
        assert listed(step) == [me], step
    assert (graphics["first"], graphics["needed"], listed(graphics)) == ("0", "0", [])
    assert listed(result.one("nvml-details")) == [me]


def test_without_a_limit_the_process_lists_are_the_driver_s(scripted):
    gpu, _ = scripted
    result = gpu.run([*NVML_INIT, "nvml-processes", "compute", 3, "nvml-details", 3],
                     env=PROCESSES)
    assert result.returncode == 0, result.describe()
    me = result.pid
    assert listed(result.one("nvml-processes")) == [(me, 999), (12, 7)]
    assert listed(result.one("nvml-details")) == [(me, 999), (12, 7), (13, 9), (me, 5)]


def test_a_program_that_only_asks_nvml_learns_its_limit_view_only(scripted):
    gpu, scheduler = scripted
    scheduler.memory_limit = 16 * MIB
    scheduler.budget_used = 5 * MIB
    seen = read_with_pynvml(gpu, env={"FAKECUDA_NVML_PROCESSES": "compute:12:7"})
    (card,) = seen["gpus"]
    assert (card["total"], card["used"], card["free"]) == (16 * MIB, 5 * MIB, 11 * MIB)
    assert card["v2"] == {"total": 16 * MIB, "reserved": 0, "used": 5 * MIB, "free": 11 * MIB}
    assert card["processes"] == []  # the driver lists others only
    (_, register), = scheduler.received(seen["pid"], p.Register)
    assert register.flags == p.REG_VIEW_ONLY
    # Nothing but the registration: no lock, no memory report, no client thread, no output.
    assert [type(m) for _, m in scheduler.received(seen["pid"], object)] == [p.Register]
    assert seen["threads"] == read_with_pynvml(gpu, env={"LD_PRELOAD": ""})["threads"]
    assert seen["stderr"] == ""


# A monitor that reads twice: once, then again after the test says so.
MONITOR = """
import json, os, runpy, sys, time
reader = runpy.run_path(sys.argv[1])
first = reader["read"]()
open(sys.argv[2], "w").close()
while not os.path.exists(sys.argv[3]):
    time.sleep(0.01)
print(json.dumps([first, reader["read"]()]))
"""


def test_a_view_only_program_takes_the_limits_sent_since_its_last_query(scripted):
    gpu, scheduler = scripted
    scheduler.memory_limit = 16 * MIB
    program = gpu.start([], command=[sys.executable, "-c", MONITOR, str(READER),
                                     str(gpu.path("read")), str(gpu.path("changed"))])
    wait_file(gpu.path("read"))
    scheduler.send(program.pid, p.Limits(8 * MIB, 2 * MIB))  # the budget changed meanwhile
    gpu.path("changed").touch()
    result = program.wait()
    assert result.returncode == 0, result.describe()
    first, second = (seen["gpus"][0] for seen in json.loads(result.stdout))
    assert (first["total"], first["used"]) == (16 * MIB, 0)
    assert (second["total"], second["used"]) == (8 * MIB, 2 * MIB)
    assert len(scheduler.received(program.pid, p.Register)) == 1


def test_a_stand_in_that_never_uses_cuda_registers_view_only_once(scripted):
    gpu, scheduler = scripted
    scheduler.memory_limit = 16 * MIB
    result = gpu.run([*NVML_INIT, "nvml-memory", 1, "nvml-memory", 2, "nvml-memory", 1])
    assert result.returncode == 0, result.describe()
    assert memory(result) == [v1(16 * MIB, 0), v2(16 * MIB, 0), v1(16 * MIB, 0)]
    assert len(scheduler.received(result.pid, p.Register)) == 1


# NVML first, then CUDA: pynvml, then the driver through ctypes (cuDeviceTotalMem waits for the
# CUDA client's registration), then pynvml again.
NVML_THEN_CUDA = """
import ctypes, json, runpy, sys
reader = runpy.run_path(sys.argv[1])
before = reader["read"]()
cuda = ctypes.CDLL("libcuda.so.1")
total = ctypes.c_size_t()
assert cuda.cuInit(0) == 0 and cuda.cuDeviceTotalMem_v2(ctypes.byref(total), 0) == 0
print(json.dumps([before, total.value, reader["read"]()]))
"""


def test_nvml_before_cuda_then_the_cuda_client_registers_instead(scripted):
    gpu, scheduler = scripted
    scheduler.memory_limit = 16 * MIB
    program = gpu.start([], command=[sys.executable, "-c", NVML_THEN_CUDA, str(READER)],
                        env={"GEMSHARE_DEBUG": "1"})
    result = program.wait()
    assert result.returncode == 0, result.describe()
    before, total, after = json.loads(result.stdout)
    assert before["gpus"][0]["total"] == total == after["gpus"][0]["total"] == 16 * MIB
    view_only, client = (m.flags for _, m in scheduler.received(result.pid, p.Register))
    assert view_only == p.REG_VIEW_ONLY and not client & p.REG_VIEW_ONLY
    assert "view-only connection closed (the CUDA client registers instead)" in result.stderr


def test_without_a_scheduler_nvml_shows_the_card_and_says_nothing(fake_gpu):
    seen = read_with_pynvml(fake_gpu)
    assert [(card["total"], card["used"]) for card in seen["gpus"]] == [(DEVICE, RESERVED)]
    assert seen["stderr"] == ""


def test_a_scheduler_that_does_not_answer_keeps_the_card_as_it_is(scripted):
    gpu, scheduler = scripted
    scheduler.memory_limit = 16 * MIB
    scheduler.registration_delay = 5  # far past the program's patience
    seen = read_with_pynvml(gpu, env={"GEMSHARE_SCHEDULER_TIMEOUT_MS": "300"})
    assert [card["total"] for card in seen["gpus"]] == [DEVICE]  # it did not wait for the limit


# The scheduler's own process, with libnvs preloaded (/etc/ld.so.preload): it listens on the
# socket, so its NVML queries must never wait for itself to answer.
AS_THE_SCHEDULER = """
import runpy, socket, sys
listener = socket.socket(socket.AF_UNIX)
listener.bind(sys.argv[1])
listener.listen()
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_the_scheduler_s_own_nvml_queries_never_wait_for_it(fake_gpu, tmp_path):
    socket = Path("/tmp") / f"gs-self-{tmp_path.name[-8:]}.sock"
    try:
        seen = read_with_pynvml(fake_gpu, env={"GEMSHARE_SOCKET": str(socket),
                                               "GEMSHARE_SCHEDULER_TIMEOUT_MS": "3600000",
                                               "GEMSHARE_DEBUG": "1"},
                                command=[sys.executable, "-c", AS_THE_SCHEDULER, str(socket),
                                         str(READER)])
    finally:
        socket.unlink(missing_ok=True)
    assert [card["total"] for card in seen["gpus"]] == [DEVICE]
    assert "this process is the scheduler" in seen["stderr"], seen["stderr"]
