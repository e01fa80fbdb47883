"""Who may change the scheduler's settings: uid 0, the user the scheduler runs as (its owner:
a user who started a scheduler on a socket of their own controls it), and members of the
control group. Never a process in a pod (but the scheduler's own): a pod may only register.

Membership counts the peer's primary gid and its supplementary groups as the kernel reported
them when it connected (peer.py): what the process really has. Only where the kernel could not
say does the system's group database decide, by the groups it lists for the peer's user.
"""

from __future__ import annotations

import grp
import os
import pwd

from ..kubernetes.cgroups import ContainerRef


def may_control(uid: int, gid: int, groups: tuple[int, ...] | None, group: str,
                owner: int) -> tuple[bool, str]:
    """(allowed, why not) for a peer of uid `uid`, to a scheduler running as uid `owner`.
    Blocking: the group database may live on the network."""
    if uid in (0, owner):
        return True, ""
    try:
        entry = grp.getgrnam(group)
    except KeyError:
        return False, (f"permission denied: only root and the scheduler's own user (uid "
                       f"{owner}) may change settings, because the control group {group!r} "
                       f"does not exist (create it and add users to it, or run as root)")
    needs = (f"permission denied: changing settings needs root, the scheduler's own user (uid "
             f"{owner}) or membership in group {group!r}")
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


def missing_group_warning(group: str, owner: int) -> str | None:
    """What to say at start when the control group does not exist, else None. Blocking."""
    try:
        grp.getgrnam(group)
    except KeyError:
        others = "" if owner == 0 else f" and uid {owner} (the user it runs as)"
        return (f"the control group {group!r} does not exist: only root{others} may change "
                f"settings; create it (groupadd {group}, then usermod -aG {group} USER) or "
                f"name another with --control-group")
    return None


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


# Why a control connection from a pod is refused: every GPU pod has the scheduler's socket
# mounted, and what the control protocol offers (settings, other programs' terms, a status
# naming every tenant of the node) is the node operator's, not a tenant's.
FROM_A_POD_PREFIX = "control requests are refused from inside a pod"
FROM_A_POD = (FROM_A_POD_PREFIX + " ({where}): a pod's programs may "
              "only register and take the GPU's lock; run gemsharectl on the node, or in the "
              "scheduler's own pod (kubectl -n gemshare-system exec ds/gemshare-scheduler -c "
              "scheduler -- gemsharectl status)")


def pod_control_refusal(pid: int, caller: ContainerRef | None, read: bool,
                        own_pod_uid: str | None) -> str | None:
    """Why process `pid` may not open a control connection, or None: its cgroup names a pod
    (`caller`) other than the scheduler's own (`own_pod_uid`), or it could not be told whether
    it does (a pid the scheduler cannot see, a cgroup not `read` in time): fail closed."""
    if pid <= 0:
        return FROM_A_POD.format(where="or from a process whose pid the scheduler cannot see, "
                                       "in another pid namespace")
    if not read:
        return FROM_A_POD.format(where=f"or from a process whose cgroup could not be read in "
                                       f"time: pid {pid}")
    if caller is None or caller.pod_uid == own_pod_uid:
        return None
    return FROM_A_POD.format(where=f"pid {pid} is in pod {caller.pod_uid}")
