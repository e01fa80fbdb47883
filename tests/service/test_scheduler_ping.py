"""PING is answered at once with PONG and its token, by the I/O shell: on a client connection
only, whatever the client's lock, and without changing what the scheduler knows of it."""

from gemshare_nvs import protocol as p


def test_ping_is_answered_with_its_token_and_changes_nothing(scheduler):
    with scheduler.connect() as client:
        client.send(p.Register(0, 0, "pinger"))
        assert isinstance(client.recv()[0], p.Registered)
        with scheduler.connect() as control:
            before = control.request({"op": "status"})["status"]["clients"]
        for token in (1, 2**64 - 1):
            client.send(p.Ping(token))
            assert client.recv()[0] == p.Pong(token)
        client.send(p.RequestLock(0))
        assert isinstance(client.recv()[0], p.LockGranted)
        client.send(p.Ping(3))
        assert client.recv()[0] == p.Pong(3)
        with scheduler.connect() as control:
            after = control.request({"op": "status"})["status"]["clients"]
        assert [(c["id"], c["waits"]) for c in before] == [(c["id"], 0) for c in after]
        assert after[0]["state"] == "holding"


def test_ping_cannot_open_a_connection(scheduler):
    with scheduler.connect() as peer:
        peer.send(p.Ping(1))
        message, _ = peer.recv()
        assert isinstance(message, p.Error) and "PING cannot open a connection" in message.text
