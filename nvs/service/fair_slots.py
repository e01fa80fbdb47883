"""Per-user caps on connections, so that one user's programs cannot take every slot.

--max-clients bounds everyone together; a user (root aside) may also hold at most
`Settings.clients_per_user()` registered clients, and as many connections again that have not
yet said what they are, so that another user, and root, always find room to register.
View-only registrations (REG_VIEW_ONLY) count against neither: they have a cap of their own
(`Settings.max_view_only`), shared the same way, so that no number of them keeps a program
from registering.

Control connections have their own cap (--max-clients plus it bounds every connection), shared
the same way: a user outside the control group may hold an eighth of it, and such users together
all but a quarter, which stays for root and the control group; root is held to none of it, the
control group to the whole cap.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..wire.conversation import CONTROL

ROOT = 0
CONTROL_PER_USER_SHARE = 8  # one user outside the control group: an eighth of the cap
CONTROL_KEPT_SHARE = 4  # a quarter kept for root and the control group


def _counts_as_root(conn) -> bool:
    """Whether an open connection is the node's root: uid 0 outside any container (a
    connection without the attribute is taken by its uid)."""
    return getattr(conn, "node_root", conn.uid == ROOT)


def _same_user(conn, uid: int) -> bool:
    """Whether `conn` counts against the caps of the user `uid` (not the node's root): uid 0
    in containers is one user of its own, apart from the node's root."""
    return conn.uid == uid and not _counts_as_root(conn)


def refusal(conns: Iterable, uid: int, user: str, kind: str | None, cap: int,
            node_root: bool | None = None) -> str | None:
    """Why a connection of `uid` may not become (or, for None, stay unnamed as) `kind`, given
    the open `conns` (each with .uid, .kind and .view_only) besides it; None when there is
    room. View-only registrations are not counted: they have slots of their own. `node_root`:
    whether it is the node's root, which no cap holds (by default, whether `uid` is 0; uid 0
    in a container is not)."""
    if uid == ROOT if node_root is None else node_root:
        return None
    held = sum(1 for conn in conns if _same_user(conn, uid) and conn.kind == kind
               and not conn.view_only)
    if held < cap:
        return None
    who = f"user {user} (uid {uid})" if user else f"uid {uid}"
    if kind is None:
        return (f"{who} already has {held} connections that have not registered, the most one "
                f"user may have (--max-clients-per-user {cap}); try again later")
    return (f"{who} already has {held} clients, the most one user may have "
            f"(--max-clients-per-user {cap}); end some of them or ask the administrator to "
            "raise the cap")


def view_only_refusal(conns: Iterable, uid: int, user: str, cap: int,
                      per_user: int, node_root: bool | None = None) -> str | None:
    """Why a connection of `uid` may not become a view-only registration beside the open
    `conns` (each with .uid and .view_only): `cap` of them together, `per_user` of one user
    (the node's root aside, as in `refusal`); None when there is room."""
    viewers = [conn for conn in conns if conn.view_only]
    if len(viewers) >= cap:
        return (f"the scheduler already has {len(viewers)} view-only registrations (nvidia-smi, "
                "NVML), its limit; try again later")
    root = uid == ROOT if node_root is None else node_root
    mine = sum(1 for conn in viewers if _same_user(conn, uid))
    if not root and mine >= per_user:
        who = f"user {user} (uid {uid})" if user else f"uid {uid}"
        return (f"{who} already has {mine} view-only registrations (nvidia-smi, NVML), the most "
                "one user may have; end some of them")
    return None


def control_room(cap: int) -> tuple[int, int]:
    """(per user, for all users together) outside the control group, of `cap` control
    connections."""
    kept = max(1, cap // CONTROL_KEPT_SHARE)
    return max(1, cap // CONTROL_PER_USER_SHARE), max(1, cap - kept)


def control_refusal(conns: Iterable, uid: int, privileged: bool, cap: int) -> str | None:
    """Why a connection of `uid` may not become a control connection beside the open `conns`
    (each with .uid, .kind and .privileged: root or the control group); None when there is
    room."""
    if uid == ROOT:
        return None
    controls = [conn for conn in conns if conn.kind == CONTROL]
    if len(controls) >= cap:
        return (f"the scheduler already has {len(controls)} control connections open, its "
                "limit; try again later")
    if privileged:
        return None
    per_user, together = control_room(cap)
    unprivileged = [conn for conn in controls if not conn.privileged]
    mine = sum(1 for conn in unprivileged if conn.uid == uid)
    if mine >= per_user:
        return (f"uid {uid} already has {mine} control connections open, the most one user "
                f"outside the control group may have; close one (a gemsharectl left running?) "
                "or try again later")
    if len(unprivileged) >= together:
        return (f"users outside the control group already have {len(unprivileged)} control "
                "connections open, all they may have together (the rest is kept for root and "
                "the control group); try again later")
    return None
