"""One client may name a bounded number of devices, so none can swell the status or the queues."""

import pytest
from policy_driver import Driver

from gemshare_nvs import protocol as p
from gemshare_nvs.core.model.actions import Close
from gemshare_nvs.core.model.device_identity import MAX_DEVICES, MAX_DEVICES_PER_CLIENT
from gemshare_nvs.observe.status import build_status

LIMIT = MAX_DEVICES_PER_CLIENT


def closes(actions) -> list[Close]:
    return [a for a in actions if isinstance(a, Close)]


@pytest.mark.parametrize("event", ["mem", "request"])
def test_a_client_may_name_the_limit_of_devices_and_not_one_more(event):
    driver = Driver()
    driver.register(1, device=5)  # its registered device counts as one of them
    others = [d for d in range(MAX_DEVICES) if d != 5][:LIMIT - 1]
    for device in others:
        if event == "mem":
            assert closes(driver.mem(1, 1 << 20, device=device)) == []
        else:
            assert closes(driver.request(1, device=device)) == []
    again = driver.mem(1, 2 << 20, device=others[0])  # naming one already named is fine
    assert closes(again) == []
    one_more = next(d for d in range(MAX_DEVICES) if d != 5 and d not in others)
    actions = driver.mem(1, 1, device=one_more) if event == "mem" else \
        driver.request(1, device=one_more)
    assert closes(actions) == [Close(1, f"device {one_more} is one too many: a client may name "
                                        f"at most {LIMIT} distinct devices",
                                     p.ErrorCode.PROTOCOL)]
    assert one_more not in driver.policy.clients[1].allocated
    assert one_more not in driver.policy.devices


def test_the_bound_is_per_client_and_keeps_the_status_small():
    driver = Driver(max_clients=2000)
    for cid in range(1, 33):  # together they name every device; each stays within its bound
        driver.register(cid)
        for k in range(LIMIT * 2):
            driver.mem(cid, 2**64 - 1, device=(cid * LIMIT + k) % MAX_DEVICES)
    assert driver.closed and all(c.code == p.ErrorCode.PROTOCOL for c in driver.closed)
    status = build_status(driver.policy, driver.now, 0.0, grace_ms=1)
    assert max(len(c["allocated_by_device"]) for c in status["clients"]) == LIMIT
