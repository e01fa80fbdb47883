"""The status always fits its frame: trimmed the same way every time, and it says so."""

import copy

from policy_driver import Driver

from gemshare_nvs.observe.status import build_status, encoded_size, fit_status


def busy_status(clients: int = 40, devices_each: int = 16) -> dict:
    driver = Driver(max_clients=clients)
    for cid in range(1, clients + 1):
        driver.register(cid, name=f"client-{cid}")
        for k in range(devices_each):
            driver.mem(cid, 2**63 + k, device=(cid + k) % 200)
    return build_status(driver.policy, driver.now, 1_800_000_000.0, grace_ms=1)


def test_a_status_that_fits_is_left_alone():
    status = busy_status()
    assert fit_status(status, encoded_size(status)) is status
    assert "truncated" not in status


def test_per_device_breakdowns_go_first():
    status = busy_status()
    without = sum(len(c["allocated_by_device"]) for c in status["clients"])
    assert without
    limit = encoded_size(status) - 100
    fitted = fit_status(copy.deepcopy(status), limit)
    assert encoded_size(fitted) <= limit
    assert [c["id"] for c in fitted["clients"]] == [c["id"] for c in status["clients"]]
    assert all("allocated_by_device" not in c for c in fitted["clients"])
    assert fitted["devices"] == status["devices"]
    assert fitted["truncated"] == {"limit_bytes": limit, "allocated_by_device_omitted": True,
                                   "clients_omitted": 0, "devices_omitted": 0}


def test_then_the_newest_clients_then_the_highest_devices():
    status = busy_status()
    tight = fit_status(copy.deepcopy(status), encoded_size(status) // 2)
    assert encoded_size(tight) <= encoded_size(status) // 2
    shown = [c["id"] for c in tight["clients"]]
    assert shown == list(range(1, len(shown) + 1)) and len(shown) < 40  # the oldest stay
    assert tight["truncated"]["clients_omitted"] == 40 - len(shown)
    assert tight["devices"] == status["devices"]
    assert tight == fit_status(copy.deepcopy(status), encoded_size(status) // 2)  # repeatable

    bare = fit_status(copy.deepcopy(status), 2000)
    assert encoded_size(bare) <= 2000 and bare["clients"] == []
    assert [d["index"] for d in bare["devices"]] == \
        [d["index"] for d in status["devices"]][:len(bare["devices"])]
    assert bare["truncated"]["devices_omitted"] == len(status["devices"]) - len(bare["devices"])
    assert bare["tq"] == status["tq"]  # the settings are always there


def test_every_limit_down_to_the_bare_settings_is_met():
    status = busy_status(clients=12, devices_each=4)
    for limit in range(600, encoded_size(status) + 1, 97):
        assert encoded_size(fit_status(copy.deepcopy(status), limit)) <= limit
