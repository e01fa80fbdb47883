"""How many connections the scheduler can hold open, as its file descriptor limit allows.

Each connection is one descriptor. Past the limit, accept() fails with EMFILE and the queued
connections wait unanswered, so the caps are brought within the limit instead: every connection
past them is answered with a clear refusal. The soft limit is first raised to the hard one (a
service's LimitNOFILE=, a shell's `ulimit -Hn`), which is the most an unprivileged process may ask.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

# Descriptors kept for everything but connections: stdio, the listening socket and its lock
# file, Trio's own, NVML's device nodes, and the files worker threads open at once (the account
# databases, the config and state files), plus the connections being refused.
RESERVED = 64
# Of what remains once the caps must shrink, the part kept for control connections, so that
# gemsharectl still gets in when the clients fill theirs, and the part for view-only
# registrations, kept apart from the programs'.
CONTROL_SHARE = 16
VIEW_ONLY_SHARE = 16


@dataclass(frozen=True)
class Caps:
    limit: int  # the soft RLIMIT_NOFILE in force
    clients: int
    control: int
    view_only: int
    clamped: bool  # whether the limit lowered what was asked for


def raise_soft_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit; the soft limit in force after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft != resource.RLIM_INFINITY and soft >= hard:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return hard
    except (ValueError, OSError):  # an unlimited hard limit the kernel caps (fs.nr_open)
        return soft


def fit(limit: int, clients: int, control: int, view_only: int) -> Caps:
    """The client, control and view-only caps that `limit` descriptors allow, as near the asked
    ones as fits; each keeps at least one slot."""
    asked = clients + control + view_only
    room = max(3, limit - RESERVED) if limit != resource.RLIM_INFINITY else asked
    if asked <= room:
        return Caps(limit, clients, control, view_only, clamped=False)
    control = max(1, min(control, room // CONTROL_SHARE))
    view_only = max(1, min(view_only, room // VIEW_ONLY_SHARE))
    return Caps(limit, max(1, min(clients, room - control - view_only)), control, view_only,
                clamped=True)
