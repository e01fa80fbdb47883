"""Policy.snapshot: the state as plain data, taken at one moment and left as it was."""

from policy_driver import Driver

from gemshare_nvs import protocol as p

G = 1 << 30


def test_a_snapshot_shows_the_locks_and_the_time_held_and_waited():
    driver = Driver(tq=10)
    for cid in (1, 2):
        driver.register(cid)
    driver.request(1)
    driver.advance(4)
    driver.request(2)  # under its share: client 1 is asked to drop, and has not answered yet
    driver.advance(3)
    snapshot = driver.policy.snapshot(driver.now)
    (device,) = snapshot.devices
    assert (device.index, device.holders, device.waiters, device.dropping) == (0, [1], [2], [1])
    first, second = snapshot.clients
    assert (first.state, first.hold_time, first.wait_time) == ("holding", 7, 0)
    assert (second.state, second.waits, second.wait_time) == ("waiting", 1, 3)
    assert (snapshot.tq, snapshot.mode) == (10, p.Mode.ON)


def test_later_events_leave_a_snapshot_as_it_was():
    driver = Driver(tq=10)
    driver.register(1)
    driver.mem(1, 2 * G, total=80 * G)
    driver.request(1)
    driver.moved(1, G, to_host=True, seconds=0.5)
    snapshot = driver.policy.snapshot(driver.now)
    driver.mem(1, 5 * G, device=1)
    driver.moved(1, G, to_host=True, seconds=0.5)
    driver.release(1, reason=p.ReleaseReason.IDLE)
    (device,) = snapshot.devices
    assert (device.holders, device.allocated, device.reported_total) == ([1], 2 * G, 80 * G)
    assert device.link is not None and device.link.moved_to_host.count == 1
    assert snapshot.clients[0].allocated == {0: 2 * G}


def test_devices_asked_for_are_listed_though_nobody_uses_them():
    driver = Driver(nvml={3: 16 * G})
    snapshot = driver.policy.snapshot(driver.now, devices=[3])
    (device,) = snapshot.devices
    assert (device.index, device.holders, device.capacity, device.capacity_source) == \
        (3, [], 16 * G, "nvml")
