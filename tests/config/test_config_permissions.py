"""Giving a client terms, reloading the config and dropping gemsharectl's settings are for root
and the control group, as `set` is; checked from processes running as other users."""

from __future__ import annotations

import grp
import os

import pytest
from privileges import require_root, run_as

from gemshare_nvs import protocol as p
from gemshare_nvs.wire.connection import Connection

NOBODY = 65534


def control_request(path: str, body: dict) -> dict:
    with Connection(path) as conn:
        return conn.request(body)


@pytest.fixture(autouse=True)
def needs_root():
    require_root()


@pytest.fixture
def with_client(scheduler_factory):
    """start(**options) -> (scheduler, the id of a client of this process)."""
    opened = []

    def start(**options):
        running = scheduler_factory(**options)
        opened.append(running.connect())
        opened[-1].send(p.Register(0, 0, "trainer"))
        registered, _ = opened[-1].recv()
        return running, registered.client_id

    yield start
    for conn in opened:
        conn.close()


def weight_of(running, client_id: int):
    status = control_request(str(running.socket), {"op": "status"})["status"]
    return next(c["weight"] for c in status["clients"] if c["id"] == client_id)


@pytest.mark.parametrize("body", [
    {"op": "client", "pid": os.getpid(), "weight": 2},
    {"op": "reload"},
    {"op": "set", "clear": True},
])
def test_others_are_refused_and_nothing_changes(with_client, body):
    running, client_id = with_client(control_group="root")
    refused = run_as(NOBODY, NOBODY, control_request, str(running.socket), body)
    assert refused["ok"] is False and refused["code"] == "permission"
    assert "group 'root'" in refused["error"]
    assert weight_of(running, client_id) == 1


def test_a_control_group_member_may_give_a_client_a_weight(with_client):
    running, client_id = with_client(control_group=grp.getgrgid(NOBODY).gr_name)
    reply = run_as(NOBODY, NOBODY, control_request, str(running.socket),
                   {"op": "client", "pid": os.getpid(), "weight": 2})
    assert reply["ok"] is True, reply
    assert weight_of(running, client_id) == 2
