"""service/readings/host_memory.py: the host's memory as /proc/meminfo says it, for the staging budget;
what cannot be read leaves the budget with its last reading."""

from pathlib import Path

import trio

from gemshare_nvs.service.readings.host_memory import read_meminfo, watch_host_memory

MEMINFO = """MemTotal:       24684116 kB
MemFree:        23711000 kB
MemAvailable:   23840000 kB
Buffers:            1234 kB
"""


def test_the_available_and_total_memory_are_read_in_bytes(tmp_path: Path):
    path = tmp_path / "meminfo"
    path.write_text(MEMINFO)
    assert read_meminfo(path) == (23840000 << 10, 24684116 << 10)


def test_a_file_without_either_line_or_with_no_number_gives_nothing(tmp_path: Path):
    path = tmp_path / "meminfo"
    path.write_text("MemTotal:       24684116 kB\n")  # a kernel before 3.14 has no MemAvailable
    assert read_meminfo(path) is None
    path.write_text("MemTotal: lots kB\nMemAvailable: 5 kB\n")
    assert read_meminfo(path) is None
    assert read_meminfo(tmp_path / "missing") is None
    path.write_bytes(b"\xff\xfe garbage \x00\n")
    assert read_meminfo(path) is None


def test_the_watch_gives_each_reading_and_skips_what_cannot_be_read(tmp_path: Path):
    path = tmp_path / "meminfo"
    readings = []

    async def main():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch_host_memory, lambda *reading: readings.append(reading),
                               path, 0.01)
            await trio.sleep(0.05)  # nothing to read yet
            path.write_text(MEMINFO)
            while not readings:
                await trio.sleep(0.01)
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert readings[0] == (23840000 << 10, 24684116 << 10)
