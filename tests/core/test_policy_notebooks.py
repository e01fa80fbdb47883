"""The policy's rules for mostly idle programs whose memory does not fit together
(docs/scheduling.md, "Notebooks"): idle co-holders make way, room is made ahead for the program
expected back first, and moves share no link."""

from overflow import overflow_share
from policy_driver import Driver

from gemshare_nvs import protocol as p
from gemshare_nvs.core.rules.cost import CONTENDED_IDLE_RELEASE_MS

G = 1 << 30
M = 1 << 20


def evicts(driver: Driver) -> list[tuple[int, int]]:
    return [(cid, m.bytes) for cid, m in driver.take_sent() if isinstance(m, p.Evict)]


def grants(driver: Driver) -> list[int]:
    return [cid for cid, m in driver.take_sent() if isinstance(m, p.LockGranted)]


def test_idle_co_holders_make_way_for_a_waiter_that_does_not_fit_beside_them():
    driver = Driver(tq=10, mode=p.Mode.AUTO, limit=20 * G, answer_evictions=True)
    for cid in (1, 2, 3):
        driver.register(cid)
        driver.mem(cid, 8 * G, total=80 * G)
    driver.request(1)
    driver.request(2)
    assert driver.holders() == [1, 2]  # 8 + 8 GiB and two reserves fit in 20
    driver.hints.clear()
    driver.request(3)  # a third does not
    assert driver.waiters() == [3]
    assert {cid: hint.idle_release_ms for cid, hint in driver.hints} == \
        {1: CONTENDED_IDLE_RELEASE_MS, 2: CONTENDED_IDLE_RELEASE_MS}
    driver.release(1, reason=p.ReleaseReason.IDLE, idle_us=100_000)
    assert driver.holders() == [2, 3]  # once 1, idle now, made room for it


def test_memory_comes_back_for_one_grant_at_a_time():
    """Two waiters that fit beside each other, each with memory it moved out itself: the second
    is granted once the first says its memory is back."""
    driver = Driver(tq=10, mode=p.Mode.AUTO, limit=20 * G, answer_evictions=True)
    for cid in (1, 2, 3):
        driver.register(cid)
        driver.mem(cid, 6 * G, total=80 * G)
    driver.configure(mode=p.Mode.OFF)  # all of them run: 18 GiB on the device
    driver.configure(mode=p.Mode.AUTO)
    for cid in (1, 2):  # moved out, as for earlier grants
        driver.policy.residency.moved_out(0, cid, 4 * G)
    driver.request(3)
    driver.take_sent()
    driver.request(1)
    driver.request(2)
    assert driver.holders() == [3, 1] and driver.waiters() == [2]
    driver.moved(1, 4 * G, to_host=False, seconds=0.1)  # 1's memory is back
    assert driver.holders() == [3, 1, 2]


def test_no_eviction_starts_while_a_holders_memory_comes_back():
    driver = Driver(tq=10, limit=20 * G)
    for cid in (1, 2, 3):
        driver.register(cid)
        driver.mem(cid, 8 * G, total=80 * G)
    driver.configure(mode=p.Mode.OFF)  # 24 GiB there
    driver.configure(mode=p.Mode.ON)
    for cid in (1, 2):  # 6 GiB of each out, by earlier evictions: 12 GiB there
        driver.policy.residency.moved_out(0, cid, 6 * G)
    driver.request(1)  # granted: its 6 GiB come back
    assert driver.holders() == [1]
    driver.take_sent()
    driver.request(2)  # waits; the idle client 3 would be asked for room for it, but not yet
    assert evicts(driver) == []
    driver.moved(1, 6 * G, to_host=False, seconds=0.1)
    assert [cid for cid, _ in evicts(driver)] == [3]


def test_room_is_made_ahead_for_the_client_expected_back_first():
    """Four programs of 8 GiB on a 25 GiB device, each idle between turns: once the device is
    left idle, the one expected back first (its gap's start plus its usual gap) finds room made
    for it, by the others, once."""
    driver = Driver(tq=10, limit=25 * G)
    for cid in (1, 2, 3, 4):
        driver.register(cid)
        driver.mem(cid, 8 * G, total=80 * G)
    driver.configure(mode=p.Mode.OFF)  # 32 GiB "there": more than fits
    driver.configure(mode=p.Mode.ON)
    for cid, usual in ((1, 3.0), (2, 1.0), (3, 3.0)):
        driver.gap_seen(cid, usual)
    driver.policy.residency.moved_out(0, 2, 8 * G)  # 2 is all off the device
    driver.request(4)
    assert driver.holders() == [4]
    driver.take_sent()
    driver.release(4, reason=p.ReleaseReason.IDLE, idle_us=100_000)
    ahead = evicts(driver)  # for 2, back first (1 s gaps), out of 1, 3 and 4
    assert ahead and {cid for cid, _ in ahead} <= {1, 3, 4}
    assert any("to make room for client 2" in log.text and "expected back in" in log.text
               for log in driver.logs)
    for cid, size in ahead:
        driver.moved(cid, size)
    while sent := evicts(driver):
        for cid, size in sent:
            driver.moved(cid, size)
    driver.request(2)  # the room is there: granted at once
    assert driver.holders() == [2] and not evicts(driver)


def test_with_no_pattern_seen_room_is_made_ahead_for_the_client_away_the_longest():
    """Two servers of 20 GiB on a 25 GiB device, no gaps seen yet: each time the one on the
    device lets go with nobody waiting, it moves out for the other, so that the other's next
    request finds the room there and waits for no move."""
    driver = Driver(tq=10, limit=25 * G, answer_evictions=True)
    for cid in (1, 2):
        driver.register(cid)
        driver.mem(cid, 20 * G, total=80 * G)
    for holder, other in ((1, 2), (2, 1), (1, 2)):
        before = len(driver.logs)
        driver.request(holder)
        assert driver.holders() == [holder] and driver.logged(before, "evict") == []
        before = len(driver.logs)
        driver.release(holder, reason=p.ReleaseReason.IDLE, idle_us=100_000)
        [ahead] = driver.logged(before, "evict")
        assert ahead.startswith(f"evict client {holder} ")
        assert f"to make room for client {other} " in ahead and "away the longest" in ahead


def test_idle_clients_are_told_to_get_ready_once_their_memory_may_have_to_leave():
    """While the memory fits nobody prepares; once a third program's memory makes it not fit,
    each idle program with memory there hears what it may have to have out (its share of the
    overflow, not all it has: its staging memory is then ready before anyone waits for it, and
    no larger than the host memory the overflow takes anyway); the holder hears it in its own
    idle hint, and as an idle program once it lets go. A larger overflow is heard again. All
    three are idle in a pattern of gaps seen, so each is asked an even part: one of none seen
    yet may be the first asked for all of it, and one asked more than its share hears what
    it was asked (the next test)."""
    driver = Driver(tq=10, limit=20 * G)
    for cid in (1, 2, 3):
        driver.register(cid)
        driver.gap_seen(cid, 3.0)
    for cid in (1, 2):
        driver.request(cid)
        driver.mem(cid, 8 * G, total=80 * G)
        driver.release(cid, reason=p.ReleaseReason.IDLE, idle_us=100_000)
    assert driver.prepares == []  # 16 GiB and a reserve fit in 20
    driver.request(3)
    driver.mem(3, 8 * G, total=80 * G)
    share = overflow_share(24 * G, 20 * G, givers=2)
    asked = [(cid, message.bytes) for cid, message in driver.sent
             if isinstance(message, p.Evict)]
    assert share < 8 * G and asked == [(1, share)]
    assert sorted((cid, hint.evict_bytes) for cid, hint in driver.prepares) == \
        [(1, share), (2, share)]
    assert driver.hints[-1][0] == 3 and driver.hints[-1][1].evict_bytes == share
    driver.prepares.clear()
    driver.mem(3, 9 * G, total=80 * G)  # 512 MiB more for each idle one
    grown = overflow_share(25 * G, 20 * G, givers=2)
    assert sorted((cid, hint.evict_bytes) for cid, hint in driver.prepares) == \
        [(1, grown), (2, grown)]
    driver.prepares.clear()
    driver.mem(3, 9 * G + 64 * M, total=80 * G)
    assert driver.prepares == []  # too little to tell anyone
    driver.release(3, reason=p.ReleaseReason.IDLE, idle_us=100_000)
    assert [(cid, hint.evict_bytes) for cid, hint in driver.prepares] == \
        [(3, overflow_share(25 * G + 64 * M, 20 * G, givers=2))]


def test_a_program_that_has_not_asked_for_the_device_makes_nobody_move_for_its_memory():
    """Its memory is on the host until it runs, and what it says it allocated is only its
    word: a client holding nothing that reported 4 TiB had three idle programs pin staging
    memory. Its request is what makes room, where NVML does not say that its process
    is on the GPU (test_policy_claims.py)."""
    driver = Driver(tq=10, limit=20 * G, answer_evictions=True)
    for cid in (1, 2):
        driver.register(cid)
    driver.request(1)
    driver.mem(1, 12 * G, total=80 * G)
    driver.release(1, reason=p.ReleaseReason.IDLE, idle_us=100_000)
    driver.mem(2, 4 << 40, total=80 * G)  # before it ever asks
    assert driver.prepares == []
    assert not any(log.text.startswith("evict ") for log in driver.logs)
    driver.request(2)  # now 1 makes room for it
    assert any(log.text.startswith("evict client 1 ") for log in driver.logs)


def test_an_idle_client_hears_when_its_memory_no_longer_has_to_leave():
    """Once the memory fits again (a program left), an idle program told to prepare hears 0,
    and libnvs gives its staging memory back to the host."""
    driver = Driver(tq=10, limit=20 * G)
    for cid in (1, 2):
        driver.register(cid)
    driver.request(1)
    driver.mem(1, 12 * G, total=80 * G)
    driver.release(1, reason=p.ReleaseReason.IDLE, idle_us=100_000)
    driver.request(2)
    driver.mem(2, 12 * G, total=80 * G)
    assert [hint.evict_bytes for cid, hint in driver.prepares if cid == 1] == \
        [overflow_share(24 * G, 20 * G, givers=1)]
    driver.prepares.clear()
    driver.disconnect(2)
    assert [(cid, hint.evict_bytes) for cid, hint in driver.prepares] == [(1, 0)]


def test_a_busy_waiter_is_passed_by_one_program_under_its_share_not_by_every_one():
    """Client 3 had a long first cell, so the others are clearly under their share beside it:
    the first of them to ask goes ahead of it, the next queues behind it, and its wait is one
    more turn, not one for each program that asks after it."""
    driver = Driver(tq=10)
    for cid in (1, 2, 3, 4):
        driver.register(cid)
    driver.request(3)
    driver.advance(4.0)  # a long first cell
    driver.release(3, reason=p.ReleaseReason.IDLE, idle_us=100_000)
    driver.request(2)  # 2 holds
    driver.request(3)
    driver.advance(0.1)
    driver.request(4)
    assert driver.waiters() == [4, 3]
    driver.request(1)
    assert driver.waiters() == [4, 3, 1]


def test_a_program_asked_for_all_the_room_was_told_to_get_ready_for_it_before():
    """Four notebooks of 12 GiB under 32 GiB, a cell each in turn: once all have allocated,
    no EVICT asks a program for more than it was told to get ready for before it (on an H200
    the first EVICT asked one for 12 GiB where it had been told its even share, 5.6 GiB, and
    the move waited 0.9 s for the rest of its staging memory to be pinned): at first none has
    a pattern of gaps, and each hears all of the overflow it may be asked for; later a program
    asked more than its even part hears what it was asked. A move asked at the allocation that
    makes the memory overflow could be told nothing before."""
    driver = Driver(tq=10, limit=32 * G)
    told: dict[int, int] = {}
    asked = []

    def heard():
        for cid, hint in driver.prepares + driver.hints:
            told[cid] = hint.evict_bytes
        driver.prepares.clear()
        driver.hints.clear()

    for cell in range(3):
        for cid in (1, 2, 3, 4):
            if cell == 0:
                driver.register(cid)
            driver.request(cid)
            if cell == 0:
                driver.mem(cid, 12 * G, total=80 * G)
            while sent := evicts(driver):
                if cell:
                    asked += [(victim, size, told.get(victim, 0)) for victim, size in sent]
                heard()  # what came with the EVICT is no help to its move
                for victim, size in sent:
                    driver.moved(victim, size)
            assert driver.holders() == [cid]
            heard()
            driver.advance(0.5)
            driver.release(cid, reason=p.ReleaseReason.IDLE, idle_us=100_000)
            heard()
            driver.advance(0.5)
    share = overflow_share(48 * G, 32 * G, givers=3)
    assert any(size > share for _, size, _ in asked)
    assert [(cid, size) for cid, size, ready in asked if size > ready] == []
