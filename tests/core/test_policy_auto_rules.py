"""Each rule of mode `auto`, driven through the policy core with a fake clock.

Most tests use a device of 10 GiB whose total the clients report, and a context reserve of
1 GiB per holder: holders fit while their GiB plus one per holder stay within 10.
"""

import pytest
from policy_driver import Driver

from gemshare_nvs import protocol as p
from gemshare_nvs.core.rules.cost import ALL_FIT_IDLE_RELEASE_MS
from gemshare_nvs.observe.status import build_status

G = 1 << 30
ON, OFF, AUTO = p.Mode.ON, p.Mode.OFF, p.Mode.AUTO
WAITED, SHARED = p.GRANT_AFTER_WAIT, p.GRANT_SHARED


def evicting_drops(driver: Driver) -> list[int]:
    """Clients sent DROP_LOCK since the last look, each asked to move memory out: these clients
    do not fit together on the device, so every drop makes room. Nothing else may have been sent."""
    sent = driver.take_sent()
    assert all(isinstance(m, p.DropLock) and m.evict_bytes > 0 for _, m in sent), sent
    return [cid for cid, _ in sent]


def auto(tq: int = 30, grace: float = 10.0, nvml: dict | None = None,
         limit: int | None = None) -> Driver:
    return Driver(tq=tq, mode=AUTO, grace=grace, reserve=1 * G, nvml=nvml, limit=limit,
                  answer_evictions=True)


def join(driver: Driver, sizes: dict[int, int], total: int = 10 * G, device: int = 0) -> None:
    """Register clients and report each one's GiB on `device` (and the device's total)."""
    for cid, gib in sizes.items():
        driver.register(cid, name=f"proc{cid}", device=device)
        driver.mem(cid, gib * G, device=device, total=total)
    driver.take_sent()


def asked(sizes: dict[int, int]) -> Driver:
    """A device in `auto` whose clients (GiB each) have joined and asked for it in turn, what
    they were sent taken."""
    driver = auto()
    join(driver, sizes)
    for cid in sizes:
        driver.request(cid)
    driver.take_sent()
    return driver


def grants(driver: Driver) -> dict[int, int]:
    """Client -> flags of the grants sent since the last look."""
    return {cid: m.flags for cid, m in driver.take_sent() if isinstance(m, p.LockGranted)}


def test_clients_whose_memory_fits_hold_together_and_are_told_they_share():
    driver = auto()
    join(driver, {1: 3, 2: 4})  # 3 + 4 + 2 reserves = 9 <= 10
    driver.request(1)
    assert grants(driver) == {1: 0}  # alone when granted
    driver.request(2)
    assert grants(driver) == {2: SHARED}  # at once, so not after a wait
    assert driver.holders() == [1, 2] and driver.waiters() == []


def test_the_reserve_is_counted_once_per_holder_to_the_byte():
    driver = auto()
    join(driver, {1: 4, 2: 4, 3: 0})
    driver.mem(3, 1)  # 4 + 4 + 1 byte + 3 reserves = 11 GiB and a byte
    for cid in (1, 2, 3):
        driver.request(cid)
    assert grants(driver) == {1: 0, 2: SHARED}  # 4 + 4 + 2 reserves = 10 exactly
    assert driver.waiters() == [3]
    driver.mem(1, 4 * G - 1 * G - 1)  # room for client 3 to the byte
    assert grants(driver) == {3: WAITED | SHARED}


def test_a_client_that_has_reported_no_memory_counts_its_reserve_only():
    driver = auto()
    join(driver, {1: 8})
    driver.register(2)  # never reports
    driver.request(1)
    driver.request(2)
    assert driver.holders() == [1, 2]  # 8 + 0 + 2 reserves = 10


def test_one_client_alone_may_exceed_the_capacity_and_then_runs_alone():
    driver = auto()
    join(driver, {1: 25, 2: 0})
    driver.request(1)
    driver.request(2)
    assert grants(driver) == {1: 0}
    assert driver.holders() == [1] and driver.waiters() == [2]
    driver.release(1, reason=p.ReleaseReason.IDLE)
    assert grants(driver) == {2: WAITED}


def test_without_a_known_capacity_auto_acts_like_on():
    driver = auto()
    join(driver, {1: 1, 2: 1}, total=0)  # the drivers did not say
    driver.request(1)
    driver.request(2)
    assert grants(driver) == {1: 0}
    assert driver.holders() == [1] and driver.waiters() == [2]
    driver.mem(2, 1 * G, total=10 * G)  # now it is known: client 2 fits beside client 1
    assert grants(driver) == {2: WAITED | SHARED}


def test_nvml_capacity_is_used_before_what_clients_report():
    driver = auto(nvml={0: 6 * G})
    join(driver, {1: 3, 2: 3}, total=80 * G)  # 3 + 3 + 2 > 6 by NVML's figure
    driver.request(1)
    driver.request(2)
    assert driver.holders() == [1] and driver.waiters() == [2]
    assert driver.policy.capacity.of(0) == (6 * G, "nvml")


def test_the_operators_limit_lowers_the_capacity_and_stands_in_for_an_unknown_one():
    driver = auto(nvml={0: 80 * G}, limit=6 * G)
    join(driver, {1: 3, 2: 3}, total=80 * G)  # 3 + 3 + 2 fits 80 GiB, not the 6 GiB limit
    driver.request(1)
    driver.request(2)
    assert driver.holders() == [1] and driver.waiters() == [2]
    assert driver.policy.capacity.of(0) == (6 * G, "limit")
    # The limit only ever lowers: a device smaller than it keeps its own figure.
    assert auto(nvml={0: 4 * G}, limit=6 * G).policy.capacity.of(0) == (4 * G, "nvml")
    # With no figure at all the limit is the capacity, rather than one holder at a time.
    unknown = auto(limit=9 * G)
    for cid in (1, 2):
        unknown.register(cid)
        unknown.mem(cid, 3 * G, total=0)
        unknown.request(cid)
    assert unknown.holders() == [1, 2]  # 3 + 3 + 2 reserves fits 9


def test_the_largest_reported_total_counts_and_leaves_with_its_client():
    driver = auto()
    join(driver, {1: 3, 2: 3})
    join(driver, {3: 0}, total=20 * G)
    driver.request(1)
    driver.request(2)
    driver.take_sent()
    assert driver.policy.capacity.of(0) == (20 * G, "reported")
    driver.mem(1, 9 * G)  # 9 + 3 + 2 = 14 fits 20, not 10
    assert driver.take_sent() == [] and driver.holders() == [1, 2]
    driver.disconnect(3)  # the 20 GiB figure goes with it: back to 10
    assert evicting_drops(driver) == [2]
    assert driver.policy.capacity.of(0) == (10 * G, "reported")


def test_a_fitting_later_arrival_passes_a_head_that_has_waited_less_than_a_quantum():
    driver = auto(tq=30)
    join(driver, {1: 5, 2: 5, 3: 1})
    driver.request(1)
    driver.request(2)  # 5 + 5 + 2 > 10: waits
    driver.advance(29)
    driver.request(3)  # 5 + 1 + 2 fits, and client 2 has waited 29 s < 30
    assert grants(driver) == {1: 0, 3: SHARED}
    assert driver.waiters() == [2]


def test_once_the_head_has_waited_a_quantum_nobody_passes_it():
    driver = auto(tq=30)
    join(driver, {1: 5, 2: 5, 3: 1})
    driver.request(1)
    driver.request(2)
    driver.advance(29.5)
    driver.take_sent()
    driver.now += 0.5  # the head has waited exactly one quantum
    driver.request(3)
    assert evicting_drops(driver) == [1]  # client 1's quantum is over too
    assert driver.waiters() == [2, 3]
    driver.release(1)
    assert grants(driver) == {2: WAITED | SHARED, 3: WAITED | SHARED}  # in order, both fit


def test_a_passed_head_is_granted_within_a_quantum_and_grace_of_its_first_quantum():
    driver = auto(tq=10, grace=2)
    join(driver, {1: 5, 2: 8, 3: 1, 4: 1})
    driver.request(1)
    driver.advance(5)
    driver.request(2)  # 5 + 8 + 2 > 10: waits from t = 105
    driver.advance(4)
    driver.request(3)  # passes client 2 at t = 109: its quantum runs to 119
    driver.advance(0.5)
    driver.request(4)  # passes too
    assert driver.holders() == [1, 3, 4]
    driver.take_sent()
    granted = {}
    for _ in range(10):  # nobody releases: only drops and revocations move it
        if 2 in driver.holders():
            break
        driver.advance_to_deadline()
        for cid, message in driver.take_sent():
            if isinstance(message, p.LockGranted):
                granted[cid] = driver.now
    assert list(granted) == [2]
    assert granted[2] <= 105 + 10 + 10 + 2  # asked at 105, a quantum of waiting, one more, grace


def test_waiters_keep_first_come_first_served_order_among_those_that_fit():
    driver = auto()
    join(driver, {1: 8, 2: 2, 3: 2, 4: 1})
    for cid in (1, 3, 2, 4):
        driver.request(cid)
    assert grants(driver) == {1: 0} and driver.waiters() == [3, 2, 4]
    driver.mem(1, 2 * G)  # 2 + 2 + 2 + 1 + 4 reserves = 11 > 10: the last one waits
    assert list(grants(driver)) == [3, 2]
    assert driver.waiters() == [4]


def test_holders_whose_quantum_is_over_are_dropped_when_someone_waits():
    driver = auto(tq=10)
    join(driver, {1: 3, 2: 3, 3: 6})
    driver.request(1)
    driver.advance(4)
    driver.request(2)
    driver.request(3)
    driver.take_sent()
    driver.advance_to_deadline()
    assert evicting_drops(driver) == [1]
    driver.advance_to_deadline()  # client 2's quantum
    assert evicting_drops(driver) == [2]


def test_no_drop_while_nobody_waits_even_with_several_holders():
    driver = auto(tq=5)
    join(driver, {1: 1, 2: 1})
    driver.request(1)
    driver.request(2)
    driver.take_sent()
    assert driver.policy.next_deadline() is None
    driver.advance(60)
    assert driver.take_sent() == []


def test_a_holder_that_grows_past_the_room_makes_the_youngest_drop_and_oldest_stay():
    driver = auto(grace=2)
    join(driver, {1: 2, 2: 2, 3: 2})
    for cid in (1, 2, 3):
        driver.request(cid)
    driver.take_sent()
    driver.mem(1, 5 * G)  # 5 + 2 + 2 + 3 reserves = 12 > 10; without client 3: 9
    assert evicting_drops(driver) == [3]
    assert any("no longer fit" in log.text for log in driver.logs)
    driver.advance_to_deadline()  # client 3 stays silent: revoked after the grace
    assert driver.take_sent() == [(3, p.LockRevoked(0))]
    assert driver.holders() == [1, 2]


def test_the_oldest_holder_stays_even_when_it_is_the_one_that_grew():
    driver = auto()
    join(driver, {1: 1, 2: 2, 3: 1})
    for cid in (1, 2, 3):
        driver.request(cid)
    driver.take_sent()
    driver.mem(2, 8 * G)  # 1 + 8 + 2 = 11: client 2 cannot stay beside 1; client 3 can
    assert evicting_drops(driver) == [2]
    driver.mem(1, 30 * G)  # now client 1 alone is past the capacity: it stays, alone
    assert evicting_drops(driver) == [3]


def test_a_dropped_holder_keeps_counting_until_it_releases_and_asks_again_at_the_back():
    driver = auto()
    join(driver, {1: 2, 2: 2, 3: 3})
    driver.request(1)
    driver.request(2)
    driver.mem(1, 5 * G)  # 5 + 2 + 2 = 9 still fits
    driver.request(3)  # 5 + 2 + 3 + 3 > 10: waits
    driver.take_sent()
    driver.mem(2, 4 * G)  # 5 + 4 + 2 = 11: client 2 must go
    assert evicting_drops(driver) == [2]
    driver.mem(2, 2 * G)  # shrank again, but it was told to drop; client 3 still waits for it
    assert driver.take_sent() == [] and driver.waiters() == [3]
    driver.release(2)
    driver.request(2)  # it asks again, behind client 3
    assert grants(driver) == {3: WAITED | SHARED}
    assert driver.holders() == [1, 3] and driver.waiters() == [2]


def test_a_holder_that_shrinks_lets_a_waiter_in_at_once():
    driver = asked({1: 7, 2: 2})
    driver.mem(1, 5 * G)
    assert grants(driver) == {2: WAITED | SHARED}


def test_leaving_auto_for_on_drops_all_but_the_oldest_and_grants_nobody_meanwhile():
    driver = auto()
    join(driver, {1: 1, 2: 1, 3: 1, 4: 1})
    for cid in (1, 2, 3):
        driver.request(cid)
    driver.take_sent()
    driver.configure(mode=ON)
    sent = driver.take_sent()
    assert [m for cid, m in sent if isinstance(m, p.DropLock)] == [p.DropLock(0)] * 2
    assert sorted(cid for cid, m in sent if isinstance(m, p.DropLock)) == [2, 3]
    driver.request(4)
    driver.release(2)
    assert grants(driver) == {}  # client 3 still holds, and client 1 is the one left
    driver.release(3)
    assert grants(driver) == {} and driver.holders() == [1] and driver.waiters() == [4]


def test_on_to_auto_admits_the_waiters_that_fit():
    driver = Driver(mode=ON, reserve=1 * G)
    join(driver, {1: 1, 2: 1, 3: 9})
    for cid in (1, 2, 3):
        driver.request(cid)
    driver.take_sent()
    driver.configure(mode=AUTO)
    assert grants(driver) == {2: WAITED | SHARED}
    assert driver.waiters() == [3]


def test_auto_to_off_and_back_clears_and_starts_again():
    driver = auto()
    join(driver, {1: 1, 2: 1})
    driver.request(1)
    driver.request(2)
    driver.configure(mode=OFF)
    assert driver.policy.devices == {}
    driver.configure(mode=AUTO)
    driver.take_sent()
    driver.request(2)
    driver.request(1)
    # Both ran unscheduled in mode off: each may find its memory moved.
    assert grants(driver) == {2: p.GRANT_OTHERS_RAN, 1: SHARED | p.GRANT_OTHERS_RAN}


def test_devices_are_budgeted_apart():
    driver = auto(nvml={1: 4 * G})
    join(driver, {1: 3, 2: 3})  # 10 GiB on device 0
    driver.mem(1, 3 * G, device=1)
    driver.mem(2, 3 * G, device=1)
    driver.request(1, device=1)
    driver.request(2, device=1)  # 3 + 3 + 2 > 4 on device 1
    driver.request(1, device=0)
    driver.request(2, device=0)
    assert (driver.holders(1), driver.waiters(1)) == ([1], [2])
    assert driver.holders(0) == [1, 2]


def test_status_shows_capacity_reserve_holders_memory_and_who_drops():
    driver = auto()
    join(driver, {1: 2, 2: 3, 3: 1})
    for cid in (1, 2, 3):
        driver.request(cid)
    driver.mem(1, 6 * G)  # client 2 no longer fits beside 1 (6 + 3 + 2), client 3 does
    status = build_status(driver.policy, driver.now, 1_800_000_000.0, grace_ms=10_000)
    device, = status["devices"]
    assert (device["capacity_bytes"], device["capacity_source"]) == (10 * G, "reported")
    assert device["context_reserve_bytes"] == 1 * G
    assert device["holders_allocated_bytes"] == 10 * G  # the dropping one still counts
    assert device["holders"] == [1, 2, 3] and device["dropping"] == [2]
    assert status["anti_thrash"] == "auto"


@pytest.mark.parametrize("mode", [ON, AUTO])
def test_memory_reports_from_waiters_or_idle_clients_change_no_holder(mode):
    driver = Driver(mode=mode, reserve=1 * G)
    join(driver, {1: 5, 2: 5, 3: 1})
    driver.request(1)
    driver.request(2)
    driver.take_sent()
    driver.mem(3, 50 * G)
    driver.mem(2, 6 * G)
    assert driver.take_sent() == [] and driver.holders() == [1]


def test_holders_that_all_fit_keep_the_lock_through_idle_gaps_until_someone_must_wait():
    driver = asked({1: 3, 2: 4})
    # Everyone so far fits (3 + 4 + 2 reserves): a release would gain nobody anything, and cost
    # the holder a round trip at its next launch, so each is told to keep the lock.
    kept = {cid: hint.idle_release_ms for cid, hint in driver.hints}
    assert kept == {1: ALL_FIT_IDLE_RELEASE_MS, 2: ALL_FIT_IDLE_RELEASE_MS}
    driver.hints.clear()
    # 3 joins, beside neither of them: all three no longer fit, but nobody waits yet. Once 3
    # asks and must wait, the holders are told at once to let go soon after their work.
    join(driver, {3: 5})
    driver.request(3)
    assert driver.waiters() == [3]
    assert {cid for cid, _ in driver.hints} == {1, 2}
    assert all(hint.idle_release_ms < ALL_FIT_IDLE_RELEASE_MS for _, hint in driver.hints)
