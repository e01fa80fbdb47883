"""Per-user caps on connections, so that one user's programs cannot take every slot.

--max-clients bounds everyone together; a user (root aside) may also hold at most
`Settings.clients_per_user()` registered clients, and as many connections again that have not
yet said what they are, so that another user, and root, always find room to register. Control
connections have their own cap (--max-clients plus it bounds every connection).
"""

from __future__ import annotations

from collections.abc import Iterable

ROOT = 0


def refusal(conns: Iterable, uid: int, user: str, kind: str | None, cap: int) -> str | None:
    """Why a connection of `uid` may not become (or, for None, stay unnamed as) `kind`, given
    the open `conns` (each with .uid and .kind) besides it; None when there is room."""
    if uid == ROOT:
        return None
    held = sum(1 for conn in conns if conn.uid == uid and conn.kind == kind)
    if held < cap:
        return None
    who = f"user {user} (uid {uid})" if user else f"uid {uid}"
    if kind is None:
        return (f"{who} already has {held} connections that have not registered, the most one "
                f"user may have (--max-clients-per-user {cap}); try again later")
    return (f"{who} already has {held} clients, the most one user may have "
            f"(--max-clients-per-user {cap}); end some of them or ask the administrator to "
            "raise the cap")
