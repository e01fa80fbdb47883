"""What the kernel says about the process at the other end of a Unix socket, read once as it
connects: SO_PEERCRED (pid, uid, gid) and SO_PEERGROUPS (its supplementary groups).

Both describe the peer as it was when it called connect(), not its user's entry in the group
database: a process that dropped a group has lost it, one started before its user was added
to a group has not gained it.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
GID = struct.Struct("I")  # gid_t
SO_PEERGROUPS = getattr(socket, "SO_PEERGROUPS", 59)  # Linux >= 4.13; Python may lack the name
GROUPS_BUFFER = 1024  # CPython reads at most this much: 256 groups


@dataclass(frozen=True)
class Credentials:
    pid: int
    uid: int
    gid: int
    groups: tuple[int, ...] | None  # None: the kernel could not say (see peer_groups)


def peer_ids(sock) -> tuple[int, int, int]:
    """(pid, uid, gid), by one call: all that deciding whether to serve the peer needs. OSError
    when the kernel has no credentials for the peer."""
    return PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                           PEERCRED.size))


def peer_credentials(sock, ids: tuple[int, int, int] | None = None) -> Credentials:
    """Everything, `ids` (peer_ids) read already or not. OSError when the kernel has no
    credentials for the peer."""
    return Credentials(*(ids or peer_ids(sock)), groups=peer_groups(sock))


def peer_groups(sock) -> tuple[int, ...] | None:
    """The peer's supplementary groups, or None where the kernel predates SO_PEERGROUPS or the
    peer has more groups than Python lets getsockopt read."""
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, SO_PEERGROUPS, GROUPS_BUFFER)
    except OSError:  # ENOPROTOOPT: too old a kernel; ERANGE: more than GROUPS_BUFFER holds
        return None
    return tuple(gid for (gid,) in GID.iter_unpack(raw))
