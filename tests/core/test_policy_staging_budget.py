"""The host memory all programs' staging may take (staging_budget.py): what each idle program is
told to prepare (IDLE_HINT's evict_bytes) stays within the operator's setting and what the host
has free, each program the same fraction of its share of the overflow, so that the first to be
told do not take it all."""

from overflow import overflow_share
from policy_driver import Driver

from gemshare_nvs import protocol as p

G = 1 << 30
M = 1 << 20
PAGE = 2 * M
CAPACITY = 20 * G


def idle_programs(driver: Driver, count: int, each: int) -> None:
    """`count` programs that each allocated `each` bytes and ran once, then one that holds."""
    for cid in range(1, count + 1):
        driver.register(cid)
        driver.request(cid)
        driver.mem(cid, each)
        driver.release(cid, reason=p.ReleaseReason.IDLE, idle_us=100_000)
    driver.register(count + 1)
    driver.request(count + 1)
    driver.mem(count + 1, each)


def told(driver: Driver) -> dict[int, int]:
    """Each idle program's last figure."""
    return {cid: hint.evict_bytes for cid, hint in driver.prepares}


def parted(figure: int, fraction: float) -> int:
    return int(figure * fraction) // PAGE * PAGE


def test_without_a_bound_each_idle_program_prepares_at_least_its_share():
    driver = Driver(tq=10, limit=CAPACITY)
    idle_programs(driver, 3, 8 * G)
    share = overflow_share(32 * G, CAPACITY, givers=3)
    assert set(told(driver)) == {1, 2, 3}
    assert all(share <= figure <= 8 * G for figure in told(driver).values())


def test_the_setting_bounds_what_all_programs_prepare_each_the_same_fraction():
    budget = 8 * G
    free = Driver(tq=10, limit=CAPACITY)
    idle_programs(free, 3, 8 * G)
    driver = Driver(tq=10, limit=CAPACITY, staging_limit=budget)
    idle_programs(driver, 3, 8 * G)
    snapshot = driver.policy.snapshot(driver.now)
    prepared = {client.registration.id: client.staging.get(0, 0) for client in snapshot.clients}
    assert sum(prepared.values()) <= budget
    assert snapshot.staging["limit_bytes"] == budget
    assert snapshot.staging["told_bytes"] == sum(prepared.values())
    # The same fraction of what each would prepare without it: nobody is left with nothing.
    fraction = snapshot.staging["fraction"]
    assert 0 < fraction < 1
    assert told(driver) == {cid: parted(figure, fraction) for cid, figure in told(free).items()}
    assert all(told(driver).values())


def test_a_host_short_of_memory_shrinks_what_they_prepare_and_more_free_memory_gives_it_back():
    driver = Driver(tq=10, limit=CAPACITY)
    idle_programs(driver, 3, 8 * G)
    before = told(driver)
    # Another job on the host took what was free and more: 1 GiB of 64 free, less than the
    # floor kept free (4 GiB), with their staging held.
    driver._take(driver.policy.host_memory(1 * G, 64 * G, driver.now))
    fraction = driver.policy.snapshot(driver.now).staging["fraction"]
    assert 0 < fraction < 1
    assert told(driver) == {cid: parted(figure, fraction) for cid, figure in before.items()}
    # It finished.
    driver._take(driver.policy.host_memory(60 * G, 64 * G, driver.now))
    assert told(driver) == before


def test_a_host_reading_that_leaves_the_budget_alone_tells_nobody_anything():
    driver = Driver(tq=10, limit=CAPACITY)
    idle_programs(driver, 3, 8 * G)
    before = len(driver.prepares), len(driver.hints)
    for free in (60 * G, 59 * G, 61 * G):
        driver._take(driver.policy.host_memory(free, 64 * G, driver.now))
    assert (len(driver.prepares), len(driver.hints)) == before
