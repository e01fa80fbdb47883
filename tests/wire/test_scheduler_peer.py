"""What the kernel says about a peer: its credentials and its own supplementary groups."""

import os
import socket

from gemshare_nvs.wire.peer import peer_credentials


def test_a_peer_is_described_by_its_process():
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with left, right:
        peer = peer_credentials(left)
    assert (peer.pid, peer.uid, peer.gid) == (os.getpid(), os.geteuid(), os.getegid())
    if len(os.getgroups()) <= 256:  # more than that, and the kernel's answer does not fit
        assert peer.groups is not None and sorted(peer.groups) == sorted(os.getgroups())
