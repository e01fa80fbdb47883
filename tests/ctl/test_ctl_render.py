"""How `gemsharectl status` writes sizes and spans, and that sparse status objects still draw."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from gemshare_ctl import render


@pytest.mark.parametrize("count, text", [
    (0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"),
    (3 << 30, "3.0 GiB"), (5 << 40, "5.0 TiB"), (5 << 50, "5120.0 TiB"),
    (None, "-"), (-1, "-"), ("12", "-")])
def test_human_bytes(count, text):
    assert render.human_bytes(count) == text


@pytest.mark.parametrize("seconds, text", [
    (0, "0.0 s"), (0.44, "0.4 s"), (59.9, "59.9 s"), (60, "1m 00s"), (183, "3m 03s"),
    (7500, "2h 05m"), (3 * 86400 + 4 * 3600 + 59, "3d 04h"), (None, "-"), (-2, "-")])
def test_human_duration(seconds, text):
    assert render.human_duration(seconds) == text


def draw(status: dict, width: int = 160) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(render.status_view(console, status, "/run/gemshare/scheduler.sock"))
    return console.file.getvalue()


def test_sparse_status_from_another_release_still_draws():
    out = draw({"tq": 5, "anti_thrash": "on", "clients": [{"pid": 42, "state": "idle"}]})
    assert "TQ 5 s" in out and "anti-thrash on" in out
    row = next(line for line in out.splitlines() if "42" in line)
    assert "idle" in row and "-" in row


def test_devices_with_nvml_show_name_memory_and_a_pending_drop():
    out = draw({"tq": 30, "anti_thrash": "on", "devices": [{
        "index": 0, "name": "NVIDIA H100", "memory_total_bytes": 80 << 30,
        "memory_used_bytes": 20 << 30, "holders": [7], "waiters": [8, 9], "drop_pending": True}],
        "clients": [{"id": 7, "pid": 100, "name": "a", "state": "holding"},
                    {"id": 8, "pid": 101, "name": "b", "state": "waiting"},
                    {"id": 9, "pid": 102, "name": "c", "state": "waiting"}]})
    row = next(line for line in out.splitlines() if "NVIDIA H100" in line)
    assert "20.0 GiB / 80.0 GiB" in row and "#7 a (pid 100), asked to drop" in row
    assert "#8 b (pid 101)" in row
    assert out.index("#8 b (pid 101)") < out.index("#9 c (pid 102)")  # first come, first listed


def test_a_trimmed_status_says_what_it_left_out():
    out = draw({"tq": 30, "anti_thrash": "on", "clients": [{"id": 1, "pid": 7, "name": "a"}],
                "truncated": {"limit_bytes": 1048555, "allocated_by_device_omitted": True,
                              "clients_omitted": 12, "devices_omitted": 1}})
    note, = [line for line in out.splitlines() if "trimmed" in line]
    assert "12 clients" in note and "1 device," in note and "per-device memory" in note
    assert "trimmed" not in draw({"tq": 30, "anti_thrash": "on", "clients": []})


def test_a_device_that_moved_memory_shows_where_it_is_and_the_rates():
    out = draw({"tq": 10, "anti_thrash": "on", "devices": [{
        "index": 0, "holders": [], "waiters": [], "resident_bytes": 16 << 30,
        "switch_cost_s": 1.25,
        "move_rates": {"to_host_gbps": 11.8, "to_device_gbps": 44.1, "measured": True},
        "moves": {"to_host": {"count": 3, "bytes": 27 << 30, "seconds": 2.4},
                  "to_device": {"count": 2, "bytes": 18 << 30, "seconds": 0.4}}}]}, width=220)
    assert "16.0 GiB on the device" in out and "switch costs 1.25 s" in out
    assert "out 11.8 GB/s, in 44.1 GB/s (measured)" in out
    assert "moved out 3x 27.0 GiB, in 2x 18.0 GiB" in out
    assert "on the device" not in draw({"tq": 10, "anti_thrash": "on",
                                        "devices": [{"index": 0}]})


def test_before_any_move_a_device_shows_the_rate_its_pcie_link_promises():
    device = {"index": 0, "holders": [], "waiters": [], "link_prior_gbps": 47.26,
              "move_rates": {"to_host_gbps": 3.0, "to_device_gbps": 10.0, "measured": False}}
    out = draw({"tq": 10, "anti_thrash": "on", "devices": [device]}, width=220)
    assert "47.26 GB/s each way expected (PCIe link)" in out and "assumed" not in out
    # Without a link NVML knows, the defaults are shown as assumed.
    del device["link_prior_gbps"]
    out = draw({"tq": 10, "anti_thrash": "on", "devices": [device]}, width=220)
    assert "out 3.0 GB/s, in 10.0 GB/s (assumed)" in out


def test_a_gang_is_one_row_with_its_members_and_turn():
    clients = [{"id": 3, "pid": 300, "name": "rank0", "state": "holding", "gang": "torchelastic:j"},
               {"id": 4, "pid": 301, "name": "rank1", "state": "holding", "gang": "torchelastic:j"},
               {"id": 5, "pid": 302, "name": "solo", "state": "waiting"}]
    gangs = [{"name": "torchelastic:j", "uid": 1000, "size": 2, "world_size": 4,
              "state": "complete", "members": [{"client": 3, "rank": 0}, {"client": 4, "rank": 1}],
              "turn_devices": [0, 1], "turn_left_s": 12.5},
             {"name": "other", "uid": 1001, "size": 3, "state": "forming", "members": [],
              "turn_devices": None, "turn_left_s": None}]
    out = draw({"tq": 30, "anti_thrash": "on", "clients": clients, "gangs": gangs})
    gangs_at = out.index("Gangs")
    row = next(line for line in out[gangs_at:].splitlines() if "torchelastic:j" in line)
    assert "complete, 2 of 2" in row and "#3 rank0 (pid 300) (0)" in row
    assert "devices 0, 1, 12.5 s left" in row
    assert "#4 rank1 (pid 301) (1)" in out[gangs_at:]
    other = next(line for line in out[gangs_at:].splitlines() if "other" in line)
    assert "forming, 0 of 3" in other and "between turns" in other
    solo = next(line for line in out[:gangs_at].splitlines() + out.splitlines() if "solo" in line)
    assert "torchelastic" not in solo
    assert "Gangs" not in draw({"tq": 30, "anti_thrash": "on", "clients": clients[2:]})


def test_a_client_on_several_gpus_shows_them_beside_its_state():
    clients = [{"id": 1, "pid": 10, "name": "two-gpus", "state": "holding", "device": 0,
                "devices": {"holding": [0, 1], "waiting": []}},
               {"id": 2, "pid": 11, "name": "one-gpu", "state": "waiting", "device": 1,
                "devices": {"holding": [], "waiting": [1]}}]
    out = draw({"tq": 30, "anti_thrash": "on", "clients": clients})
    assert "holding 0, 1" in next(line for line in out.splitlines() if "two-gpus" in line)
    waiting = next(line for line in out.splitlines() if "one-gpu" in line)
    assert "waiting" in waiting and "waiting 1" not in waiting  # its own device: said already


def test_a_clients_label_shows_in_the_clients_table():
    out = draw({"tq": 30, "anti_thrash": "on", "clients": [
        {"id": 1, "pid": 7, "name": "python3", "label": "notebook", "state": "idle"},
        {"id": 2, "pid": 8, "name": "python3", "label": "", "state": "idle"}]})
    header = next(line for line in out.splitlines() if "Name" in line)
    assert "Label" in header
    assert "notebook" in next(line for line in out.splitlines() if " 7 " in line)
    unlabelled = draw({"tq": 30, "anti_thrash": "on", "clients": [
        {"id": 2, "pid": 8, "name": "python3", "label": "", "state": "idle"}]})
    assert "Label" not in unlabelled  # no column of dashes


def test_view_only_registrations_are_counted_in_the_summary_with_their_cap():
    out = draw({"tq": 30, "anti_thrash": "on", "clients": [],
                "view_only": {"registered": 12, "max": 256, "per_user": 64}})
    assert "0 clients, view-only 12/256" in out


def test_staging_shows_what_programs_prepare_against_the_budget_once_they_were_told():
    assert "Staging" not in draw({"tq": 5, "staging": {"told_bytes": 0}})
    bounded = draw({"tq": 5, "staging": {"limit_bytes": 8 << 30, "budget_bytes": 8 << 30,
                                         "told_bytes": 7 << 30, "fraction": 0.5}})
    assert "Staging memory: 7.0 GiB told to prepare, within 8.0 GiB (--staging-max-mib): " \
        "each program 50% of its share" in " ".join(bounded.split())
    free = draw({"tq": 5, "staging": {"limit_bytes": None, "budget_bytes": 20 << 30,
                                      "told_bytes": 3 << 30, "fraction": 1.0}})
    assert "within 20.0 GiB (the host's free memory)" in free and "%" not in free
