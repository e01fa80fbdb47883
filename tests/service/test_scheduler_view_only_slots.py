"""View-only registrations (REG_VIEW_ONLY: nvidia-smi, pynvml under libnvs) have slots of their
own: however many one user opens, within their cap, programs still register, its own and
root's, and status says how many there are."""

import socket

import pytest
from privileges import connected_as, require_root

from gemshare_nvs import protocol as p
from gemshare_nvs.config.settings import DEFAULT_MAX_VIEW_ONLY

NOBODY = 65534
PER_USER = DEFAULT_MAX_VIEW_ONLY // 4  # view-only registrations one user may hold
REPLY_TIMEOUT = 10.0


@pytest.fixture(autouse=True)
def needs_root():
    require_root()


def register(sock: socket.socket, name: str, flags: int = 0):
    """Send REGISTER on `sock`; the first message that comes back (REGISTERED or ERROR)."""
    sock.settimeout(REPLY_TIMEOUT)
    sock.sendall(p.encode(p.Register(0, flags, name), 1))
    decoder = p.FrameDecoder()
    while True:
        data = sock.recv(65536)
        assert data, "the scheduler closed the connection without a reply"
        decoder.feed(data)
        while (item := decoder.next()) is not None:
            if isinstance(item[0], (p.Registered, p.Error)):
                return item[0]


def status(running) -> dict:
    with running.connect() as control:
        return control.request({"op": "status"})["status"]


def test_many_view_only_registrations_leave_every_program_its_slot(scheduler_factory):
    running = scheduler_factory(max_clients=8)  # 2 programs per user
    path = str(running.socket)
    root_viewers = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    for _ in range(DEFAULT_MAX_VIEW_ONLY - PER_USER + 1)]
    root_program = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    opened = [*root_viewers, root_program]
    try:
        got = []
        # Two at a time: a user may hold no more connections that have not registered yet.
        for _ in range(PER_USER // 2 + 1):
            pair = connected_as(NOBODY, NOBODY, path, 2)
            opened += pair
            got += [register(sock, "nvidia-smi", p.REG_VIEW_ONLY) for sock in pair]
        programs = connected_as(NOBODY, NOBODY, path, 2)
        opened += programs
        assert len(got) == PER_USER + 2
        assert all(isinstance(answer, p.Registered) for answer in got[:PER_USER])
        refused = got[PER_USER]
        assert isinstance(refused, p.Error) and refused.code == p.ErrorCode.TOO_MANY_CLIENTS
        assert f"already has {PER_USER} view-only registrations" in refused.text
        # Its programs have their own slots, untouched by its view-only ones.
        assert all(isinstance(register(sock, "train"), p.Registered) for sock in programs)
        for sock in root_viewers:  # root fills what is left of the view-only slots, and more
            sock.connect(path)
        got = [register(sock, "nvidia-smi", p.REG_VIEW_ONLY) for sock in root_viewers]
        assert all(isinstance(answer, p.Registered) for answer in got[:-1])
        assert isinstance(got[-1], p.Error) and \
            f"already has {DEFAULT_MAX_VIEW_ONLY} view-only registrations" in got[-1].text
        root_program.connect(path)
        assert isinstance(register(root_program, "serve"), p.Registered)
        shown = status(running)
        assert sorted(client["name"] for client in shown["clients"]) == \
            ["serve", "train", "train"]
        assert shown["view_only"] == {"registered": DEFAULT_MAX_VIEW_ONLY,
                                      "max": DEFAULT_MAX_VIEW_ONLY, "per_user": PER_USER}
    finally:
        for sock in opened:
            sock.close()
