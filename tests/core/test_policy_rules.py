"""Each scheduling rule of mode `on`, driven through the policy core with a fake clock."""

import pytest
from policy_driver import Driver

from gemshare_nvs import protocol as p
from gemshare_nvs.core.model.actions import Close
from gemshare_nvs.core.model.device_identity import MAX_DEVICES

ON, OFF, AUTO = p.Mode.ON, p.Mode.OFF, p.Mode.AUTO


def clients(driver: Driver, *ids: int) -> None:
    for cid in ids:
        driver.register(cid, name=f"proc{cid}")
    driver.take_sent()


def test_register_answers_with_id_mode_and_tq():
    driver = Driver(tq=12, mode=OFF)
    driver.register(5)
    assert driver.take_sent(5) == [p.Registered(5, OFF, 12)]


def test_free_lock_is_granted_at_once_without_wait_flag():
    driver = Driver(tq=30)
    clients(driver, 1)
    driver.request(1)
    assert driver.take_sent(1) == [p.LockGranted(0, 0, 30_000)]
    assert driver.holders() == [1]


def test_waiters_are_granted_first_come_first_served_with_wait_flag():
    driver = Driver()
    clients(driver, 1, 2, 3, 4)
    for cid in (1, 3, 2, 4):
        driver.request(cid)
    driver.take_sent()
    assert driver.waiters() == [3, 2, 4]
    order = []
    for _ in range(3):
        holder = driver.holders()[0]
        driver.release(holder, reason=p.ReleaseReason.IDLE)
        (cid, grant), = driver.take_sent()
        assert grant == p.LockGranted(0, p.GRANT_AFTER_WAIT, 30_000)
        order.append(cid)
    assert order == [3, 2, 4]


def test_holder_with_nobody_waiting_keeps_the_lock_without_drop():
    driver = Driver(tq=5)
    clients(driver, 1)
    driver.request(1)
    driver.take_sent()
    assert driver.policy.next_deadline() is None
    for _ in range(10):
        driver.advance(7)
    assert driver.take_sent() == []
    assert driver.holders() == [1]


def test_drop_is_sent_when_the_quantum_ends_and_someone_waits():
    driver = Driver(tq=30)
    clients(driver, 1, 2)
    driver.request(1)
    driver.request(2)  # as the grant starts, so no less busy than client 1: no share claim
    driver.take_sent()
    assert driver.policy.next_deadline() == pytest.approx(100 + 30)
    driver.advance(29.9)
    assert driver.take_sent() == []
    driver.advance_to_deadline()
    assert driver.take_sent() == [(1, p.DropLock(0))]
    assert driver.holders() == [1]  # it keeps the lock until it answers


def test_waiter_arriving_after_the_quantum_expired_causes_an_immediate_drop():
    driver = Driver(tq=10)
    clients(driver, 1, 2)
    driver.request(1)
    driver.advance(60)
    driver.take_sent()
    driver.request(2)
    assert driver.take_sent() == [(1, p.DropLock(0))]


def test_release_after_drop_grants_the_next_waiter():
    driver = Driver(tq=10)
    clients(driver, 1, 2)
    driver.request(1)
    driver.request(2)
    driver.advance_to_deadline()
    driver.take_sent()
    driver.advance(0.2)
    driver.release(1, reason=p.ReleaseReason.DROPPED)
    assert driver.take_sent() == [(2, p.LockGranted(0, p.GRANT_AFTER_WAIT, 10_000))]
    assert driver.policy.clients[1].revocations == 0


def test_holder_silent_after_drop_is_revoked_exactly_after_the_grace_period():
    driver = Driver(tq=10, grace=2.5)
    clients(driver, 1, 2)
    driver.request(1)
    driver.request(2)
    driver.advance_to_deadline()
    dropped_at = driver.now
    driver.take_sent()
    assert driver.policy.next_deadline() == dropped_at + 2.5
    driver.advance(2.4)
    assert driver.take_sent() == [] and driver.holders() == [1]
    driver.advance_to_deadline()
    assert driver.now == dropped_at + 2.5
    assert driver.take_sent() == [(1, p.LockRevoked(0)),
                                  (2, p.LockGranted(0, p.GRANT_AFTER_WAIT, 10_000))]
    client = driver.policy.clients[1]
    assert (client.revocations, client.revoked) == (1, True)
    assert any("revoke client 1" in log.text and not log.debug for log in driver.logs)


def test_late_release_after_revocation_is_ignored():
    driver = Driver(tq=1, grace=1)
    clients(driver, 1, 2)
    driver.request(1)
    driver.request(2)
    driver.advance_to_deadline()
    driver.advance_to_deadline()
    driver.take_sent()
    driver.release(1, reason=p.ReleaseReason.REVOKED)
    driver.release(1, reason=p.ReleaseReason.DROPPED)
    assert driver.take_sent() == []
    assert driver.holders() == [2]


def test_release_from_a_client_that_holds_nothing_is_ignored():
    driver = Driver()
    clients(driver, 1, 2)
    driver.request(1)
    driver.request(2)
    driver.take_sent()
    driver.release(2)  # a waiter
    driver.release(1, device=3)  # a device it never held
    assert driver.take_sent() == []
    assert (driver.holders(), driver.waiters()) == ([1], [2])


def test_repeated_request_changes_nothing():
    driver = Driver()
    clients(driver, 1, 2)
    driver.request(1)
    driver.request(2)
    driver.take_sent()
    driver.request(1)
    driver.request(2)
    assert driver.take_sent() == []
    assert (driver.holders(), driver.waiters()) == ([1], [2])
    assert driver.policy.clients[2].waits == 1


def test_early_idle_release_hands_the_lock_over_at_once():
    driver = Driver(tq=30)
    clients(driver, 1, 2)
    driver.request(1)
    driver.request(2)
    driver.advance(1)
    driver.take_sent()
    driver.release(1, reason=p.ReleaseReason.IDLE)
    assert driver.take_sent() == [(2, p.LockGranted(0, p.GRANT_AFTER_WAIT, 30_000))]


def test_idle_release_with_nobody_waiting_frees_the_lock_for_the_next_request():
    driver = Driver()
    clients(driver, 1)
    driver.request(1)
    driver.release(1, reason=p.ReleaseReason.IDLE)
    driver.take_sent()
    assert driver.policy.devices == {}
    driver.request(1)
    assert driver.take_sent() == [(1, p.LockGranted(0, 0, 30_000))]


def test_disconnected_holder_frees_the_lock_for_the_next_waiter_at_once():
    driver = Driver()
    clients(driver, 1, 2, 3)
    for cid in (1, 2, 3):
        driver.request(cid)
    driver.take_sent()
    driver.disconnect(1)
    assert driver.take_sent() == [(2, p.LockGranted(0, p.GRANT_AFTER_WAIT, 30_000))]
    assert 1 not in driver.policy.clients


def test_disconnected_waiter_leaves_the_queue_and_is_never_granted():
    driver = Driver()
    clients(driver, 1, 2, 3)
    for cid in (1, 2, 3):
        driver.request(cid)
    driver.disconnect(2)
    driver.release(1, reason=p.ReleaseReason.IDLE)
    driver.take_sent()
    assert driver.holders() == [3]
    for _ in range(5):
        driver.advance(40)
    assert all(cid != 2 for cid, _ in driver.take_sent())


def test_events_from_unknown_clients_are_ignored():
    driver = Driver()
    assert driver.request(9) == [] and driver.release(9) == [] and driver.disconnect(9) == []
    assert driver.mem(9, 100) == []


def test_devices_have_independent_locks():
    driver = Driver()
    clients(driver, 1, 2)
    driver.request(1, device=0)
    driver.request(2, device=1)
    assert driver.take_sent() == [(1, p.LockGranted(0, 0, 30_000)),
                                  (2, p.LockGranted(1, 0, 30_000))]


def test_mode_off_tells_everyone_and_clears_holders_and_waiters():
    driver = Driver(tq=30)
    clients(driver, 1, 2, 3)
    driver.request(1)
    driver.request(2)
    driver.take_sent()
    driver.configure(mode=OFF)
    assert sorted(driver.take_sent()) == [(cid, p.SchedMode(OFF, 30)) for cid in (1, 2, 3)]
    assert driver.policy.devices == {} and driver.policy.next_deadline() is None
    driver.request(3)
    driver.advance(100)
    assert driver.take_sent() == []


def test_mode_back_on_takes_requests_again():
    driver = Driver(mode=OFF)
    clients(driver, 1)
    driver.configure(mode=ON)
    assert driver.take_sent() == [(1, p.SchedMode(ON, 30))]
    driver.request(1)
    assert driver.take_sent() == [(1, p.LockGranted(0, 0, 30_000))]


def test_auto_mode_without_a_known_capacity_keeps_one_holder_per_device():
    driver = Driver(mode=AUTO)  # no NVML, no reported device total
    clients(driver, 1, 2)
    driver.request(1)
    driver.request(2)
    assert driver.holders() == [1] and driver.waiters() == [2]


def test_shorter_tq_re_evaluates_the_running_quantum_at_once():
    driver = Driver(tq=30)
    clients(driver, 1, 2)
    driver.request(1)
    driver.request(2)
    driver.advance(10)
    driver.take_sent()
    driver.configure(tq=5)
    assert driver.take_sent() == [(1, p.SchedMode(ON, 5)), (2, p.SchedMode(ON, 5)),
                                  (1, p.DropLock(0))]


def test_longer_tq_postpones_the_drop():
    driver = Driver(tq=10)
    clients(driver, 1, 2)
    driver.request(1)
    driver.request(2)
    driver.advance(5)
    driver.configure(tq=60)
    driver.take_sent()
    assert driver.policy.next_deadline() == pytest.approx(100 + 60)
    driver.advance(20)
    assert driver.take_sent() == []


def test_unchanged_settings_send_nothing():
    driver = Driver(tq=30)
    clients(driver, 1)
    driver.configure(tq=30, mode=ON)
    assert driver.take_sent() == []


def settings_lines(driver: Driver) -> list[str]:
    return [log.text for log in driver.logs if log.text.startswith("settings")]


def test_a_settings_change_names_only_what_changed():
    driver = Driver(tq=30)
    driver.configure(tq=10)
    driver.configure(mode=AUTO)
    driver.configure(tq=20, mode=ON)
    assert settings_lines(driver) == ["settings: tq 30 -> 10 s", "settings: anti-thrash on -> auto",
                                      "settings: tq 10 -> 20 s, anti-thrash auto -> on"]


def test_unchanged_settings_are_logged_in_full():
    driver = Driver(tq=30)
    driver.configure(tq=30)
    assert settings_lines(driver) == ["settings unchanged: tq 30 s, anti-thrash on, "
                                      f"min slice {driver.policy.min_slice_ms} ms"]


def test_client_limit_refuses_registration_with_too_many_clients():
    driver = Driver(max_clients=2)
    clients(driver, 1, 2)
    driver.register(3)
    assert driver.take_sent() == []
    assert [(c.client, c.code) for c in driver.closed] == [(3, p.ErrorCode.TOO_MANY_CLIENTS)]
    assert "max-clients" in driver.closed[0].reason
    driver.disconnect(1)
    driver.register(4)
    assert driver.take_sent() == [(4, p.Registered(4, ON, 30))]


@pytest.mark.parametrize("event", ["register", "request", "mem"])
def test_device_index_out_of_range_closes_the_client(event):
    driver = Driver()
    if event == "register":
        actions = driver.register(1, device=MAX_DEVICES)
    else:
        clients(driver, 1)
        actions = getattr(driver, event)(1, **({"device": MAX_DEVICES} if event == "request"
                                               else {"allocated": 1, "device": MAX_DEVICES}))
    assert [a for a in actions if isinstance(a, Close)] == [
        Close(1, f"device index {MAX_DEVICES} is out of range (below {MAX_DEVICES})",
              p.ErrorCode.PROTOCOL)]
    assert driver.policy.devices == {}


def test_each_event_is_logged_naming_client_pid_and_process():
    driver = Driver(tq=1, grace=1)
    driver.register(1, name="trainer", pid=321)
    driver.register(2, name="other", pid=654)
    driver.request(1)
    driver.request(2)
    driver.advance_to_deadline()
    driver.advance_to_deadline()
    driver.release(2, reason=p.ReleaseReason.IDLE)
    driver.disconnect(1)
    lines = [log.text for log in driver.logs if not log.debug]
    for event in ("register", "request", "grant", "drop", "revoke", "release", "disconnect"):
        assert any(line.startswith(event) and "(pid " in line for line in lines), event
    assert any("client 1 (pid 321, trainer)" in line for line in lines)


def test_control_characters_in_names_are_not_logged_raw():
    driver = Driver()
    driver.register(1, name="evil\nINFO grant client 99")
    assert driver.policy.clients[1].registration.name == "evil?INFO grant client 99"
    assert all("\n" not in log.text for log in driver.logs)


GIB = 1 << 30


@pytest.mark.parametrize("mode", [ON, AUTO])
def test_drop_asks_for_eviction_when_the_next_holder_needs_the_room(mode):
    driver = Driver(tq=10, mode=mode)
    clients(driver, 1, 2)
    driver.mem(1, 6 * GIB, total=10 * GIB)
    driver.mem(2, 6 * GIB, total=10 * GIB)
    driver.request(1)
    driver.request(2)
    driver.take_sent()
    driver.advance_to_deadline()
    # 6 + 6 GiB and the next holder's context reserve of 512 MiB in 10 GiB: 2.5 GiB over, plus
    # the 256 MiB margin, all of it the holder's to move.
    assert driver.take_sent() == [(1, p.DropLock(0, 0, 2816 << 20))]
    assert any("evict 2816 MiB to the host" in log.text for log in driver.logs)


@pytest.mark.parametrize("sizes, total", [((2 * GIB, 2 * GIB), 10 * GIB),  # both fit
                                          ((6 * GIB, 6 * GIB), 0)])  # capacity unknown
def test_drop_without_eviction_when_both_fit_or_capacity_is_unknown(sizes, total):
    driver = Driver(tq=10)
    clients(driver, 1, 2)
    for cid, size in zip((1, 2), sizes):
        driver.mem(cid, size, total=total)
    driver.request(1)
    driver.request(2)
    driver.take_sent()
    driver.advance_to_deadline()
    assert driver.take_sent() == [(1, p.DropLock(0))]
