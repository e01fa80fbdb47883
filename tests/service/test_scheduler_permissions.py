"""Who may do what, checked with SO_PEERCRED from processes running as other users."""

import grp
import pwd

import pytest
from privileges import require_root, run_as

from gemshare_nvs import protocol as p
from gemshare_nvs.wire.connection import Connection

NOBODY = 65534


def control_request(path: str, body: dict) -> dict:
    with Connection(path) as conn:
        return conn.request(body)


def register_as_client(path: str) -> int:
    with Connection(path) as conn:
        conn.send(p.Register(0, 0, "unprivileged"))
        registered, _ = conn.recv()
        conn.send(p.RequestLock(0))
        granted, _ = conn.recv()
        assert isinstance(granted, p.LockGranted), granted
        status = control_request(path, {"op": "status"})["status"]
        return next(c["uid"] for c in status["clients"] if c["id"] == registered.client_id)


@pytest.fixture(autouse=True)
def needs_root():
    require_root()


def test_anyone_may_read_status_but_not_set(scheduler_factory):
    running = scheduler_factory(control_group="gemshare-nonexistent-group")
    path = str(running.socket)
    status = run_as(NOBODY, NOBODY, control_request, path, {"op": "status"})
    assert status["ok"] is True and status["status"]["tq"] == 30
    refused = run_as(NOBODY, NOBODY, control_request, path, {"op": "set", "tq": 5})
    assert refused["ok"] is False and refused["code"] == "permission"
    assert "gemshare-nonexistent-group" in refused["error"]
    assert "does not exist" in refused["error"]
    after = control_request(path, {"op": "status"})["status"]
    assert (after["tq"], after["anti_thrash"]) == (30, "on")


def test_non_member_is_told_which_group_to_join(scheduler_factory):
    running = scheduler_factory(control_group="root")
    refused = run_as(NOBODY, NOBODY, control_request, str(running.socket),
                     {"op": "set", "anti_thrash": "off"})
    assert refused["code"] == "permission"
    assert "group 'root'" in refused["error"] and "uid 65534" in refused["error"]
    assert "refused: permission denied" in running.log()


def test_any_local_user_may_be_a_client_and_its_uid_comes_from_the_kernel(scheduler):
    assert run_as(NOBODY, NOBODY, register_as_client, str(scheduler.socket)) == NOBODY


def test_member_by_primary_gid_may_set(scheduler_factory):
    group = grp.getgrgid(NOBODY).gr_name
    running = scheduler_factory(control_group=group)
    reply = run_as(NOBODY, NOBODY, control_request, str(running.socket),
                   {"op": "set", "tq": 12, "anti_thrash": "auto"})
    assert reply == {"ok": True, "tq": 12, "anti_thrash": "auto"}


def supplementary_member():
    """(user entry, group name) for a user listed in a group other than its primary one."""
    for group in grp.getgrall():
        for name in group.gr_mem:
            try:
                user = pwd.getpwnam(name)
            except KeyError:
                continue
            if user.pw_uid != 0 and user.pw_gid != group.gr_gid:
                return user, group.gr_name
    return None


def other_group(not_gid: int) -> grp.struct_group:
    """An existing group, not `not_gid`, that the group database does not give to nobody."""
    for group in grp.getgrall():
        if group.gr_gid not in (0, not_gid, NOBODY) and \
                pwd.getpwuid(NOBODY).pw_name not in group.gr_mem:
            return group
    pytest.skip("no group to give a process")


def test_member_by_process_group_may_set_whatever_the_database_says(scheduler_factory):
    # nobody is in no group in the database; its process carries the group all the same.
    group = other_group(NOBODY)
    running = scheduler_factory(control_group=group.gr_name)
    reply = run_as(NOBODY, NOBODY, control_request, str(running.socket), {"op": "set", "tq": 44},
                   groups=[group.gr_gid])
    assert reply == {"ok": True, "tq": 44, "anti_thrash": "on"}


def test_database_member_whose_process_dropped_the_group_is_refused(scheduler_factory):
    found = supplementary_member()
    if found is None:
        pytest.skip("no user on this system has a supplementary group")
    user, group = found
    running = scheduler_factory(control_group=group)
    refused = run_as(user.pw_uid, user.pw_gid, control_request, str(running.socket),
                     {"op": "set", "tq": 44})  # run_as leaves it no supplementary group
    assert refused["ok"] is False and refused["code"] == "permission"
    assert f"group {group!r}" in refused["error"] and "log in again" in refused["error"]
    assert control_request(str(running.socket), {"op": "status"})["status"]["tq"] == 30


def test_more_groups_than_the_kernel_reports_fall_back_to_the_database(scheduler_factory):
    # Past 256 groups SO_PEERGROUPS cannot be read whole: the database decides instead.
    found = supplementary_member()
    if found is None:
        pytest.skip("no user on this system has a supplementary group")
    user, group = found
    wanted = grp.getgrnam(group).gr_gid
    many = [gid for gid in range(100_000, 100_300)]  # none of them the control group
    running = scheduler_factory(control_group=group)
    reply = run_as(user.pw_uid, user.pw_gid, control_request, str(running.socket),
                   {"op": "set", "tq": 45}, groups=many)
    assert wanted not in many and reply == {"ok": True, "tq": 45, "anti_thrash": "on"}
