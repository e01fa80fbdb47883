"""How `gemsharectl status` draws where settings come from, the config file, each client's
weight, limits and usage, and each device's slices and last drop."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from gemshare_ctl import render

CONFIG = "/etc/gemshare/gemshare.toml"
BASE = {"tq": 12, "anti_thrash": "auto", "min_slice_ms": 300, "grace_ms": 10000}


def draw(status: dict, width: int = 200) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(render.status_view(console, status, "/run/gemshare/scheduler.sock"))
    return console.file.getvalue()


def test_each_setting_says_where_it_came_from_unless_a_default():
    out = draw({**BASE, "settings_from": {
        "tq": "gemsharectl", "anti_thrash": f"config ({CONFIG}:2)", "min_slice_ms": "default",
        "grace_ms": "command line"}, "clients": []})
    assert "TQ 12 s (gemsharectl)" in out
    assert "anti-thrash auto (config line 2)" in out
    assert "min slice 300 ms   grace 10 s (command line)" in out


def test_the_config_file_its_refusal_and_temporary_settings_are_said():
    out = draw({**BASE, "clients": [],
                "config": {"path": CONFIG, "loaded": True, "rules": 3, "loaded_at": 1.7e9,
                           "problem": f"1 problem: {CONFIG}:4: tq: tq must be ..."},
                "runtime_settings": {"persistent": False,
                                     "problem": "/var/lib is not writable by the scheduler"}})
    assert f"Config {CONFIG}: 3 rules, loaded " in out
    assert f"Config not reloaded: 1 problem: {CONFIG}:4: tq" in out
    assert "last only until the scheduler stops: /var/lib is not writable" in out
    quiet = draw({**BASE, "clients": [], "config": {"path": CONFIG, "loaded": False},
                  "runtime_settings": {"persistent": True, "problem": None}})
    assert f"Config {CONFIG}: none in force" in quiet and "until the scheduler" not in quiet


def test_clients_show_weight_limits_sources_and_usage():
    out = draw({**BASE, "clients": [
        {"id": 1, "pid": 10, "name": "nb", "state": "idle", "weight": 2, "gpu_limit": 0.5,
         "memory_limit": 16 << 30, "usage_s": {"0": 42.0, "1": 3.0},
         "terms_from": {"weight": f"config rule 1 ({CONFIG}:5)", "gpu_limit": "gemsharectl",
                        "memory_limit": f"config rule 1 ({CONFIG}:5)"}},
        {"id": 2, "pid": 11, "name": "plain", "state": "idle", "weight": 1, "gpu_limit": None,
         "memory_limit": None, "usage_s": {}, "terms_from": {"weight": "default"}}]})
    header = next(line for line in out.splitlines() if "Weight" in line)
    assert "Limits" in header and "Terms from" in header and "Usage" in header
    row = next(line for line in out.splitlines() if " nb " in line)
    assert "50% GPU, 16.0 GiB" in row and "rule 1, gemsharectl" in row and "45.0 s" in row
    plain = next(line for line in out.splitlines() if "plain" in line)
    assert " 1 " in plain and "0.0 s" in plain


def test_columns_nobody_has_anything_for_are_left_out():
    out = draw({**BASE, "clients": [{"id": 1, "pid": 10, "name": "a", "state": "idle"}]})
    for header in ("Weight", "Limits", "Terms from", "Usage", "Pod"):
        assert header not in out, header


def test_holders_show_their_slice_and_devices_their_last_drop():
    out = draw({**BASE, "devices": [{
        "index": 0, "holders": [7], "waiters": [8], "slices_s": {"7": 4.25},
        "turns_s": {"7": 12.0}, "last_drop": {"client": 8, "reason": "share"}}],
        "clients": [{"id": 7, "pid": 100, "name": "a", "state": "holding"},
                    {"id": 8, "pid": 101, "name": "b", "state": "waiting"}]})
    row = next(line for line in out.splitlines() if "#7 a" in line)
    assert "#7 a (pid 100), 4.2 s of 12.0 s" in row and "#8 b (pid 101): share" in row
    assert "Last drop" in out
    idle = draw({**BASE, "devices": [{"index": 0, "holders": [], "waiters": [],
                                      "last_drop": {"client": 7, "reason": "idle"}}],
                 "clients": [{"id": 7, "pid": 100, "name": "a", "state": "idle"}]})
    assert "#7 a (pid 100): idle" in idle
    assert "Last drop" not in draw({**BASE, "devices": [{"index": 0, "holders": [],
                                                        "waiters": [], "last_drop": None}]})


def test_holders_waiters_and_the_last_drop_show_the_decisions_that_stand_for_them():
    def decided(words):
        return {"stage": "shares", "decision": words}
    out = draw({**BASE, "devices": [{
        "index": 0, "holders": [7], "waiters": [8],
        "last_drop": {"client": 9, "reason": "share"},
        "decisions": {"clients": {"7": decided("granted: under its share"),
                                  "8": {"stage": "gaps",
                                        "decision": "waits: behind a lender back from its gap"}},
                      "last_drop": decided("dropped: slice over for a waiter under its share")}}],
        "clients": [{"id": 7, "pid": 100, "name": "a", "state": "holding"},
                    {"id": 8, "pid": 101, "name": "b", "state": "waiting"},
                    {"id": 9, "pid": 102, "name": "c", "state": "idle"}]})
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if "#7 a (pid 100)" in line)
    # Each decision on the line below its client, in the same column (wrapped when long).
    below = lines[first + 1]
    assert "#9 c (pid 102): share" in lines[first]
    for start in ("granted: under its share", "waits: behind a lender", "dropped: slice over"):
        assert start in below, start
    # A status without decisions (an older scheduler) shows the clients alone.
    plain = draw({**BASE, "devices": [{"index": 0, "holders": [7], "waiters": []}],
                  "clients": [{"id": 7, "pid": 100, "name": "a", "state": "holding"}]})
    assert "granted" not in plain


def test_one_clients_terms_name_every_source():
    text = render.terms_view({"id": 3, "pid": 42, "name": "nb", "label": "notebook",
                              "weight": 2, "gpu_limit": 0.25, "memory_limit": None,
                              "terms_from": {"weight": "gemsharectl",
                                             "gpu_limit": f"config rule 2 ({CONFIG}:9)"}}).plain
    assert text.splitlines() == [
        "#3 nb (pid 42), label notebook",
        "  weight: 2 (gemsharectl)",
        f"  gpu_limit: 25% of the GPU's time (config rule 2 ({CONFIG}:9))",
        "  memory_limit: none (default)"]


def test_terms_from_gemsharectl_are_said_to_last_only_until_a_disconnect_or_restart():
    lasts = "until the client disconnects or the scheduler restarts"
    given = {"id": 3, "pid": 42, "name": "nb", "state": "idle", "weight": 2,
             "terms_from": {"weight": "gemsharectl"},
             "overrides": {"values": {"weight": 2}, "lasts": lasts}}
    plain = {"id": 4, "pid": 43, "name": "tr", "state": "idle", "weight": 1,
             "terms_from": {"weight": "default"}, "overrides": None}
    assert render.terms_view(given).plain.splitlines()[-1] == \
        f"Terms from gemsharectl last {lasts}."
    assert "last until" not in render.terms_view(plain).plain
    assert f"Terms from gemsharectl last {lasts}." in draw({**BASE, "clients": [plain, given]})
    assert "last until" not in draw({**BASE, "clients": [plain]})


def test_the_mps_terms_say_where_the_program_runs_and_why():
    text = render.terms_view({"id": 3, "pid": 42, "name": "nb", "weight": 1, "gpu_limit": None,
                              "memory_limit": None, "sm_share": 30, "mps": True,
                              "mps_priority": "low",
                              "terms_from": {"sm_share": f"config rule 1 ({CONFIG}:3)",
                                             "mps_priority": f"config rule 1 ({CONFIG}:3)"}}).plain
    assert text.splitlines()[-3:] == [
        f"  sm_share: 30% of the SMs (config rule 1 ({CONFIG}:3))", "  mps: yes (default)",
        f"  mps_priority: low (config rule 1 ({CONFIG}:3))"]
    kept_out = render.terms_view({"id": 4, "pid": 43, "name": "train", "sm_share": None,
                                  "mps": False, "mps_why": "its owner set GEMSHARE_MPS=0",
                                  "terms_from": {}}).plain
    assert kept_out.splitlines()[-1] == "  mps: no (its owner set GEMSHARE_MPS=0) (default)"


def test_the_mps_column_gives_the_sm_share_and_a_low_priority():
    clients = [{"id": 1, "pid": 41, "name": "train", "state": "idle", "mps": True,
                "sm_share": 50, "mps_priority": "low"},
               {"id": 2, "pid": 42, "name": "notebook", "state": "idle", "mps": True,
                "sm_share": None, "mps_priority": "normal"},
               {"id": 3, "pid": 43, "name": "job", "state": "idle", "mps": True,
                "sm_share": None, "mps_priority": "low"}]
    assert [render.through_mps(c) for c in clients] == ["yes 50% low", "yes", "yes low"]
    out = draw({**BASE, "clients": clients})
    assert "yes 50% low" in out and "yes low" in out


def test_a_scheduler_without_the_mps_priority_term_shows_no_line_for_it():
    text = render.terms_view({"id": 3, "pid": 42, "name": "nb", "sm_share": None, "mps": True,
                              "terms_from": {}}).plain
    assert "mps_priority" not in text


def test_a_container_shows_with_its_pod_its_shared_budget_and_the_kubelet_as_source():
    budget = {"gpu_uuid": "GPU-1", "memory_bytes": 8 << 30, "compute_units": 30,
              "clients": [1, 2], "others_allocated_bytes": 3 << 30}
    trainer = {"id": 1, "pid": 10, "name": "train", "state": "idle", "pod": "train-0",
               "namespace": "ml", "container": "main", "identity_from": "node",
               "weight": 1.5, "gpu_limit": None, "memory_limit": 8 << 30, "budget": budget,
               "terms_from": {"weight": "kubelet", "memory_limit": "kubelet"}}
    out = draw({**BASE, "clients": [trainer, {**trainer, "id": 2, "name": "loader"},
                                    {"id": 3, "pid": 12, "name": "alone", "state": "idle",
                                     "pod": "nb", "namespace": "ml", "container": None,
                                     "memory_limit": 4 << 30, "budget": None}]}, width=260)
    row = next(line for line in out.splitlines() if " train " in line)
    assert "ml/train-0 (main)" in row and "8.0 GiB shared by 2" in row and "kubelet" in row
    alone = next(line for line in out.splitlines() if " alone " in line)
    assert "ml/nb " in alone and "4.0 GiB" in alone and "shared" not in alone
    terms = io.StringIO()
    Console(file=terms, width=200, color_system=None).print(render.terms_view(trainer))
    text = terms.getvalue()
    assert "pod ml/train-0 (main) (from the node)" in text
    assert "memory_limit: 8.0 GiB (kubelet)" in text
    assert "container budget on GPU-1: 8.0 GiB of memory and 30 compute units, shared with #2 " \
           "(who have 3.0 GiB allocated)" in text


@pytest.mark.parametrize("identity_from, said", [
    ("node: not named yet", "pod not named by the node yet (the defaults until it is)"),
    ("node: in no pod", "in no pod (the node says)"),
])
def test_a_program_the_node_has_not_named_says_so(identity_from, said):
    text = render.terms_view({"id": 4, "pid": 44, "name": "job", "pod": "", "namespace": "",
                              "identity_from": identity_from, "terms_from": {}}).plain
    assert said in text
