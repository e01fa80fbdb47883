"""Who may change the scheduler's settings: uid 0 and members of the control group.

Membership counts the peer's primary gid (from SO_PEERCRED) and the supplementary groups of its
user as the system's group database lists them.
"""

from __future__ import annotations

import grp
import os
import pwd


def may_control(uid: int, gid: int, group: str) -> tuple[bool, str]:
    """(allowed, why not). Blocking: the group database may live on the network."""
    if uid == 0:
        return True, ""
    try:
        entry = grp.getgrnam(group)
    except KeyError:
        return False, (f"permission denied: only root may change settings, because the control "
                       f"group {group!r} does not exist (create it and add users to it, or run "
                       f"as root)")
    if gid == entry.gr_gid or _supplementary_member(uid, gid, entry):
        return True, ""
    return False, (f"permission denied: changing settings needs root or membership in group "
                   f"{group!r} (uid {uid} is not a member; ask an admin to add you, then log in "
                   f"again)")


def _supplementary_member(uid: int, gid: int, entry: grp.struct_group) -> bool:
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
