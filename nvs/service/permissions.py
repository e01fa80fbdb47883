"""Who may change the scheduler's settings: uid 0 and members of the control group.

Membership counts the peer's primary gid and its supplementary groups as the kernel reported
them when it connected (peer.py): what the process really has. Only where the kernel could not
say does the system's group database decide, by the groups it lists for the peer's user.
"""

from __future__ import annotations

import grp
import os
import pwd


def may_control(uid: int, gid: int, groups: tuple[int, ...] | None,
                group: str) -> tuple[bool, str]:
    """(allowed, why not). Blocking: the group database may live on the network."""
    if uid == 0:
        return True, ""
    try:
        entry = grp.getgrnam(group)
    except KeyError:
        return False, (f"permission denied: only root may change settings, because the control "
                       f"group {group!r} does not exist (create it and add users to it, or run "
                       f"as root)")
    needs = f"permission denied: changing settings needs root or membership in group {group!r}"
    if gid == entry.gr_gid:
        return True, ""
    if groups is not None:
        if entry.gr_gid in groups:
            return True, ""
        return False, (f"{needs}, and the connecting process (uid {uid}) does not have that "
                       f"group; if you were just added to it, log in again (or use 'newgrp "
                       f"{group}') so that your processes carry it")
    if _database_member(uid, gid, entry):
        return True, ""
    return False, (f"{needs} (uid {uid} is not a member in the group database; ask an admin "
                   f"to add you)")


def _database_member(uid: int, gid: int, entry: grp.struct_group) -> bool:
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        return False  # a uid with no account can only belong through its primary gid
    if user in entry.gr_mem:
        return True
    try:
        return entry.gr_gid in os.getgrouplist(user, gid)
    except OSError:
        return False
