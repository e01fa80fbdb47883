"""NVML's processes of each GPU as the policy gets them (service/readings/process_watch.py): with the
name, uid and managed memory mapped that /proc gives, and without the scheduler's own process or
NVIDIA's MPS server."""

from __future__ import annotations

import os

import pytest
import trio

from gemshare_nvs.core.rules.checks.claims import MARGIN, GpuProcess
from gemshare_nvs.service.readings.process_watch import (MPS_SERVER, POLL_S, UVM_MAPPING,
                                                         ProcessWatch)

GIB = 1 << 30


class ListedGpus:
    def __init__(self, listed: dict):
        self.listed = listed
        self.reads = 0

    def processes(self) -> dict:
        self.reads += 1
        return self.listed


def fake_proc(tmp_path, pid: int, name: str, uid: int, maps: str | None = ""):
    """/proc/PID of a process; `maps` None: its maps unreadable, as another user's are."""
    folder = tmp_path / str(pid)
    folder.mkdir(parents=True)
    (folder / "comm").write_text(name + "\n")
    (folder / "status").write_text(f"Name:\t{name}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    if maps is not None:
        (folder / "maps").write_text(maps)


# As a CUDA program's maps show them (an H200, 2026-12-02): device memory is anonymous, each
# managed allocation a shared mapping of the UVM device of its size, touched or not.
CUDA_MAPS = f"""\
200000000-200200000 ---p 00000000 00:00 0 
7f0000000000-7f0040000000 rw-s 00000000 00:05 1161                       {UVM_MAPPING}
7f0040000000-7f0100000000 rw-s 00000000 00:05 1161                       {UVM_MAPPING}
7f0100000000-7f0100200000 rw-s 7f0100000000 00:05 1159                   /dev/nvidia0
7f0200000000-7f0200001000 r--p 00000000 08:01 4242                       /usr/lib/libcuda.so.1
garbage line
"""


def test_the_list_names_each_process_and_leaves_out_the_schedulers_own(tmp_path):
    fake_proc(tmp_path, 100, "python", 1000)
    fake_proc(tmp_path, 200, MPS_SERVER, 0)
    watch = ProcessWatch(ListedGpus({0: {100: 1 << 30, 200: 0, os.getpid(): 0, 300: 5}}),
                         tmp_path)
    assert watch.read() == {0: {100: GpuProcess(100, 1 << 30, "python", 1000, 0),
                                300: GpuProcess(300, 5, "", None)}}


def test_each_process_comes_with_the_managed_memory_it_has_mapped(tmp_path):
    fake_proc(tmp_path, 100, "python", 1000, CUDA_MAPS)
    fake_proc(tmp_path, 200, "python", 1001, maps=None)  # not the scheduler's to read
    watch = ProcessWatch(ListedGpus({0: {100: GIB, 200: GIB}, 1: {100: 0}}), tmp_path)
    read = watch.read()
    assert read[0][100].managed_bytes == read[1][100].managed_bytes == 4 * GIB
    assert read[0][100].ceiling == GIB + 4 * GIB + MARGIN
    assert read[0][200].managed_bytes is None and read[0][200].ceiling is None


def test_another_path_may_stand_for_the_uvm_device(tmp_path):
    fake_proc(tmp_path, 100, "standin", 1000, CUDA_MAPS.replace(UVM_MAPPING, "/memfd:x (deleted)"))
    gpus = ListedGpus({0: {100: 0}})
    assert ProcessWatch(gpus, tmp_path).read()[0][100].managed_bytes == 0
    assert ProcessWatch(gpus, tmp_path, "/memfd:x (deleted)").read()[0][100].managed_bytes == 4 * GIB


@pytest.mark.trio
@pytest.mark.parametrize("pid, reported", [(555, 0), (100, GIB + MARGIN + 1)],
                         ids=["not listed", "more than its mappings bear out"])
async def test_a_report_the_last_list_cannot_bear_out_brings_the_next_list_at_once(
        tmp_path, pid, reported):
    fake_proc(tmp_path, 100, "standin", 1000,
              f"7f0000000000-7f0040000000 rw-s 00000000 00:05 1161 {UVM_MAPPING}\n")
    gpus = ListedGpus({0: {100: 0}})
    watch = ProcessWatch(gpus, tmp_path)
    taken = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch.watch, lambda devices, read_at: taken.append(read_at))
        await trio.sleep(0.2)
        assert gpus.reads == 1
        watch.want(100, GIB + MARGIN)  # listed already, with that much mapped: no new list
        await trio.sleep(0.2)
        assert gpus.reads == 1
        asked = trio.current_time()
        watch.want(pid, reported)
        while gpus.reads < 2:
            await trio.sleep(0.01)
        # Long before the next poll, a second after the first.
        assert trio.current_time() - asked < POLL_S / 2
        nursery.cancel_scope.cancel()
    assert len(taken) == 2
