"""Clients are keyed by the physical GPU they use (DEVICE_UUID), not by their own CUDA ordinal,
which depends on each process's CUDA_VISIBLE_DEVICES. Messages to a client still name the
device by its own ordinal."""

from policy_driver import Driver

from gemshare_nvs import protocol as p
from gemshare_nvs.core.model.device_identity import MAX_DEVICES
from gemshare_nvs.observe.status import build_status

A = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
B = "GPU-bbbbbbbb-0000-0000-0000-000000000000"
G = 1 << 30


def joined(driver: Driver, cid: int, ordinal: int, uuid: str | None) -> None:
    driver.register(cid, name=f"proc{cid}", device=ordinal)
    if uuid:
        driver.uuid(cid, uuid, device=ordinal)
    driver.take_sent()


def test_one_gpu_under_two_ordinals_is_one_lock_and_each_hears_its_own_ordinal():
    driver = Driver(tq=30)
    joined(driver, 1, 0, A)  # CUDA_VISIBLE_DEVICES=<A>: A is its device 0
    joined(driver, 2, 1, A)  # all GPUs visible: A is its device 1
    driver.request(1, device=0)
    driver.request(2, device=1)
    assert driver.holders(0) == [1] and driver.waiters(0) == [2]
    assert driver.take_sent() == [(1, p.LockGranted(0, 0, 30_000))]
    driver.advance(30)  # quantum over: the holder is told in its own numbering
    assert driver.take_sent() == [(1, p.DropLock(0, 0))]
    driver.release(1, device=0)
    assert driver.take_sent() == [(2, p.LockGranted(1, p.GRANT_AFTER_WAIT, 30_000))]
    driver.advance(30)
    assert driver.take_sent() == []  # nobody waits: no needless drop
    driver.request(1, device=0)  # its quantum is long over: dropped at once
    assert driver.take_sent() == [(2, p.DropLock(1, 0))]
    driver.advance(10)  # no answer within the grace period
    assert driver.take_sent() == [
        (2, p.LockRevoked(1)),
        (1, p.LockGranted(0, p.GRANT_AFTER_WAIT | p.GRANT_OTHERS_RAN, 30_000))]


def test_two_gpus_under_one_ordinal_are_two_locks():
    driver = Driver(tq=30)
    joined(driver, 1, 0, A)
    joined(driver, 2, 0, B)  # another GPU, also its device 0
    driver.request(1)
    driver.request(2)
    assert driver.take_sent() == [(1, p.LockGranted(0, 0, 30_000)),
                                  (2, p.LockGranted(0, 0, 30_000))]
    assert driver.holders(0) == [1] and driver.holders(1) == [2]  # B got the next free index
    joined(driver, 3, 0, B)  # B is remembered: the same index again
    assert driver.policy.clients[3].numbering.device == 1


def test_nvml_numbers_the_gpus_it_knows():
    driver = Driver(nvml_uuids={B: 0, A: 1})
    joined(driver, 1, 0, A)
    joined(driver, 2, 3, B)
    assert (driver.policy.clients[1].numbering.device,
            driver.policy.clients[2].numbering.device) == (1, 0)
    status = build_status(driver.policy, driver.now, 1_800_000_000.0, grace_ms=10_000)
    assert {(c["id"], c["device"], c["gpu_uuid"]) for c in status["clients"]} == \
        {(1, 1, A), (2, 0, B)}


def test_memory_follows_the_gpu_and_other_ordinals_stop_counting_once_renumbered():
    driver = Driver(nvml_uuids={A: 2})
    driver.register(1, device=0)
    driver.mem(1, 3 * G, device=0, total=80 * G)
    driver.mem(1, 1 * G, device=1)  # another GPU of its own, identity unknown
    driver.uuid(1, A)
    client = driver.policy.clients[1]
    assert client.allocated == {2: 3 * G}
    capacity = driver.policy.capacity
    assert (capacity.reported(2), capacity.reported(0)) == (80 * G, 0)  # its total moved too
    driver.mem(1, 5 * G, device=1)
    driver.mem(1, 4 * G, device=0)
    assert client.allocated == {2: 4 * G}


def test_a_uuid_that_would_renumber_a_requested_device_changes_nothing():
    driver = Driver(nvml_uuids={A: 2})
    driver.register(1, device=0)
    driver.request(1)
    driver.uuid(1, A)
    assert driver.policy.clients[1].numbering.gpu_uuid == "" and driver.holders(0) == [1]
    assert any("came after a lock request" in log.text for log in driver.logs)
    driver.register(2, device=0)
    driver.uuid(2, "")
    assert driver.policy.clients[2].numbering.uuids == {}


def test_every_device_of_a_client_is_keyed_by_its_gpu():
    driver = Driver(nvml_uuids={A: 0, B: 1})
    driver.register(1, device=0)  # CUDA_VISIBLE_DEVICES=1,0: its 0 is GPU B, its 1 is GPU A
    driver.uuid(1, B, device=0)
    driver.uuid(1, A, device=1)
    driver.mem(1, 3 * G, device=1)
    driver.register(2, device=0)
    driver.uuid(2, A, device=0)
    driver.request(2, device=0)  # GPU A
    driver.request(1, device=1)  # GPU A as well: it waits behind client 2
    driver.request(1, device=0)  # GPU B: free
    assert (driver.holders(0), driver.waiters(0), driver.holders(1)) == ([2], [1], [1])
    assert driver.policy.clients[1].allocated == {0: 3 * G}
    driver.take_sent()
    driver.release(2, device=0)
    assert driver.take_sent(1) == [p.LockGranted(1, p.GRANT_AFTER_WAIT, 30_000)]  # its own 1


def test_a_request_for_an_unknown_device_of_a_renumbered_client_closes_it():
    driver = Driver(nvml_uuids={A: 1})
    joined(driver, 1, 0, A)
    driver.request(1, device=2)
    (close,) = driver.closed
    assert close.client == 1 and close.code == p.ErrorCode.PROTOCOL


def test_invented_uuids_cannot_exhaust_the_scheduler():
    driver = Driver(max_clients=MAX_DEVICES + 10)
    for cid in range(1, MAX_DEVICES + 6):
        joined(driver, cid, 0, f"GPU-{cid:08x}-0000-0000-0000-000000000000")
    assert len(driver.policy.gpu_indices.given) == MAX_DEVICES
    # No index left: its own ordinal.
    assert driver.policy.clients[MAX_DEVICES + 5].numbering.device == 0
