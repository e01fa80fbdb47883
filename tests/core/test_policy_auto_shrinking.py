"""Property test of shrinking in mode `auto`, aimed at several holders whose memory changes.

Up to six clients hold a 16 GiB device together (those that fit ask); then random
memory reports make holders grow and shrink. After every report:

- the holders not asked to drop fit (bytes plus a 1 GiB reserve each), or are a single client;
- the oldest holder not asked to drop is never asked to drop;
- every holder asked to drop by that report does not fit beside the older holders that stay,
  and no holder that fits beside them is asked: the oldest stay, each one that still fits.

The general state machine (test_policy_auto_invariants.py) checks the same among every other
event; this one makes sure that sets of three and more holders shrink often.
"""

from hypothesis import given, settings
from hypothesis import strategies as st
from policy_driver import Driver

from gemshare_nvs import protocol as p

G = 1 << 30
CAPACITY, RESERVE = 16 * G, 1 * G


def fits(sizes: list[int]) -> bool:
    return len(sizes) <= 1 or sum(sizes) + RESERVE * len(sizes) <= CAPACITY


@settings(max_examples=300, deadline=None)
@given(sizes=st.lists(st.integers(0, 4), min_size=2, max_size=6),
       reports=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 20)), min_size=1,
                        max_size=12))
def test_holders_that_no_longer_fit_shrink_to_the_oldest_that_do(sizes, reports):
    driver = Driver(mode=p.Mode.AUTO, reserve=RESERVE)
    clients = list(range(1, len(sizes) + 1))
    memory = dict(zip(clients, (gib * G for gib in sizes)))
    for cid in clients:
        driver.register(cid)
        driver.mem(cid, memory[cid], total=CAPACITY)
        if fits([memory[c] for c in driver.holders()] + [memory[cid]]):
            driver.request(cid)  # only those that fit: nobody waits, so nobody joins later
    driver.take_sent()
    staying = driver.holders()  # oldest grant first
    assert len(staying) >= 2 and driver.waiters() == []
    for index, gib in reports:
        cid = clients[index % len(clients)]
        memory[cid] = gib * G
        driver.mem(cid, memory[cid])
        dropped = [c for c, message in driver.take_sent() if isinstance(message, p.DropLock)]
        if dropped:
            assert staying[0] not in dropped, "the oldest holder was asked to drop"
        before = staying
        staying = [c for c in before if c not in dropped]
        assert fits([memory[c] for c in staying]), f"holders {staying} do not fit"
        for position, c in enumerate(before):  # stays exactly when it fits beside older stayers
            older = [memory[o] for o in before[:position] if o in staying]
            assert fits(older + [memory[c]]) == (c in staying), (c, before, staying)
