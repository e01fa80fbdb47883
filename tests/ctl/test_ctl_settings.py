"""The contract commands `gemsharectl --set-tq N --anti-thrash MODE` against a real scheduler."""

from __future__ import annotations

import json

from gemshare_nvs import protocol


def status_json(ctl, scheduler) -> dict:
    result = ctl("--socket", str(scheduler.socket), "status", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_exact_contract_command_sets_both(ctl, scheduler_factory):
    scheduler = scheduler_factory(tq=5)
    result = ctl("--set-tq", "30", "--anti-thrash", "off",
                 env={"GEMSHARE_SOCKET": str(scheduler.socket)})
    assert result.returncode == 0, result.stderr
    assert "TQ 30 s" in result.stdout and "anti-thrash off" in result.stdout
    status = status_json(ctl, scheduler)
    assert (status["tq"], status["anti_thrash"]) == (30, "off")


def test_set_tq_alone_leaves_the_mode(ctl, scheduler):
    result = ctl("--socket", str(scheduler.socket), "--set-tq", "45")
    assert result.returncode == 0, result.stderr
    status = status_json(ctl, scheduler)
    assert (status["tq"], status["anti_thrash"]) == (45, "on")


def test_set_anti_thrash_alone_leaves_the_tq(ctl, scheduler):
    result = ctl("--socket", str(scheduler.socket), "--anti-thrash", "off")
    assert result.returncode == 0, result.stderr
    status = status_json(ctl, scheduler)
    assert (status["tq"], status["anti_thrash"]) == (30, "off")


def test_mode_is_case_insensitive_and_sent_in_lower_case(ctl, scheduler):
    assert ctl("--socket", str(scheduler.socket), "--anti-thrash", "AUTO").returncode == 0
    assert status_json(ctl, scheduler)["anti_thrash"] == "auto"


def test_settings_change_before_status_in_one_command(ctl, scheduler):
    result = ctl("--socket", str(scheduler.socket), "--set-tq", "12", "status", "--json")
    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout[result.stdout.index("{"):])
    assert status["tq"] == 12


def test_socket_option_wins_over_environment(ctl, scheduler, tmp_path):
    result = ctl("--socket", str(scheduler.socket), "--set-tq", "7",
                 env={"GEMSHARE_SOCKET": str(tmp_path / "nobody-listens.sock")})
    assert result.returncode == 0, result.stderr
    assert status_json(ctl, scheduler)["tq"] == 7


def test_connected_clients_hear_the_new_mode(ctl, scheduler, stand_in_client):
    client = stand_in_client(scheduler.socket, "trainer")
    assert ctl("--socket", str(scheduler.socket), "--anti-thrash", "off",
               "--set-tq", "9").returncode == 0
    change = client.next_of(protocol.SchedMode)
    assert (change.mode, change.tq_seconds) == (protocol.Mode.OFF, 9)
