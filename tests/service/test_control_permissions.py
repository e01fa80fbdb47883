"""Who may change settings: root, the user the scheduler runs as, and the control group; and a
control group that does not exist is named at start."""

from __future__ import annotations

import grp
import os

from gemshare_nvs.service.permissions import may_control, missing_group_warning

MISSING = "gemshare-no-such-group"
OWNER = 4242  # a uid with no account: only the owner rule can let it in


def existing_group() -> grp.struct_group:
    return grp.getgrgid(os.getgid())


def test_the_schedulers_own_user_may_control_it_without_any_group():
    assert may_control(OWNER, OWNER, (), MISSING, owner=OWNER) == (True, "")


def test_another_user_may_not_and_is_told_who_may():
    allowed, why = may_control(OWNER + 1, OWNER + 1, (), MISSING, owner=OWNER)
    assert not allowed
    assert f"scheduler's own user (uid {OWNER})" in why and repr(MISSING) in why


def test_root_and_the_control_group_still_may():
    group = existing_group()
    assert may_control(0, 0, (), MISSING, owner=OWNER)[0]
    assert may_control(OWNER + 1, OWNER + 1, (group.gr_gid,), group.gr_name, owner=OWNER)[0]
    allowed, why = may_control(OWNER + 1, OWNER + 1, (), group.gr_name, owner=OWNER)
    assert not allowed and "does not have that group" in why


def test_a_missing_control_group_is_warned_of_naming_who_may_control():
    words = missing_group_warning(MISSING, owner=OWNER)
    assert words is not None and repr(MISSING) in words
    assert f"only root and uid {OWNER}" in words and "--control-group" in words
    assert "uid 0" not in missing_group_warning(MISSING, owner=0)
    assert missing_group_warning(existing_group().gr_name, owner=OWNER) is None


def test_the_scheduler_warns_at_start_of_a_missing_control_group(scheduler_factory):
    running = scheduler_factory(control_group=MISSING)
    assert f"the control group {MISSING!r} does not exist" in running.log()
    quiet = scheduler_factory(control_group=existing_group().gr_name)
    assert "does not exist" not in quiet.log()
