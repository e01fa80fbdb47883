"""The shared `scheduler_factory` fixture starts a real scheduler that grants, logs and stops."""

import time

from gemshare_nvs import protocol as p


def test_factory_passes_options_and_grants_in_order(scheduler_factory):
    running = scheduler_factory(tq=7, anti_thrash="on", grace_ms=300)
    first, second = running.connect(), running.connect()
    first.send(p.Register(0, 0, "first"))
    second.send(p.Register(0, 0, "second"))
    registered, _ = first.recv()
    assert registered.tq_seconds == 7 and registered.mode == p.Mode.ON
    second.recv()
    first.send(p.RequestLock(0))
    assert first.recv()[0] == p.LockGranted(0, 0, 7000)
    second.send(p.RequestLock(0))
    with running.connect() as control:  # the request must arrive before the release
        for _ in range(500):
            if control.request({"op": "status"})["status"]["devices"][0]["waiters"]:
                break
            time.sleep(0.01)
    first.send(p.LockReleased(0, p.ReleaseReason.IDLE))
    assert second.recv()[0] == p.LockGranted(0, p.GRANT_AFTER_WAIT, 7000)
    assert "grant client" in running.log()
    first.close()
    second.close()
    assert running.stop() == 0
    assert not running.socket.exists()


def test_default_scheduler_reports_defaults(scheduler):
    with scheduler.connect() as control:
        status = control.request({"op": "status"})["status"]
    assert (status["tq"], status["anti_thrash"], status["grace_ms"]) == (30, "on", 10000)
