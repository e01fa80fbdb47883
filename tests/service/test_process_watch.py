"""NVML's processes of each GPU as the policy gets them (service/readings/process_watch.py): with the
name and uid /proc gives, and without the scheduler's own process or NVIDIA's MPS server."""

from __future__ import annotations

import os

import pytest
import trio

from gemshare_nvs.core.rules.checks.claims import GpuProcess
from gemshare_nvs.service.readings.process_watch import MPS_SERVER, POLL_S, ProcessWatch


class ListedGpus:
    def __init__(self, listed: dict):
        self.listed = listed
        self.reads = 0

    def processes(self) -> dict:
        self.reads += 1
        return self.listed


def fake_proc(tmp_path, pid: int, name: str, uid: int):
    folder = tmp_path / str(pid)
    folder.mkdir(parents=True)
    (folder / "comm").write_text(name + "\n")
    (folder / "status").write_text(f"Name:\t{name}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")


def test_the_list_names_each_process_and_leaves_out_the_schedulers_own(tmp_path):
    fake_proc(tmp_path, 100, "python", 1000)
    fake_proc(tmp_path, 200, MPS_SERVER, 0)
    watch = ProcessWatch(ListedGpus({0: {100: 1 << 30, 200: 0, os.getpid(): 0, 300: 5}}),
                         tmp_path)
    assert watch.read() == {0: {100: GpuProcess(100, 1 << 30, "python", 1000),
                                300: GpuProcess(300, 5, "", None)}}


@pytest.mark.trio
async def test_a_report_from_a_process_not_listed_brings_the_next_list_at_once(tmp_path):
    gpus = ListedGpus({0: {100: 0}})
    watch = ProcessWatch(gpus, tmp_path)
    taken = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch.watch, lambda devices, read_at: taken.append(read_at))
        await trio.sleep(0.2)
        assert gpus.reads == 1
        watch.want(100)  # listed already: no new list
        await trio.sleep(0.2)
        assert gpus.reads == 1
        asked = trio.current_time()
        watch.want(555)
        while gpus.reads < 2:
            await trio.sleep(0.01)
        # Long before the next poll, a second after the first.
        assert trio.current_time() - asked < POLL_S / 2
        nursery.cancel_scope.cancel()
    assert len(taken) == 2
