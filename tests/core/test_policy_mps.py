"""Which programs the policy core sends through the scheduler's MPS server, decided as each
registers: the MPS frame comes before REGISTERED, or not at all, and status says why not."""

from __future__ import annotations

from policy_driver import Driver

from gemshare_nvs import protocol as p
from gemshare_nvs.core.model.terms import Terms
from gemshare_nvs.core.rules import mps_rules

PIPE = "/run/gemshare/mps/pipe"


def mps_driver(mode: p.Mode = p.Mode.AUTO, rules=None, running: bool = True,
               **options) -> Driver:
    driver = Driver(mode=mode, mps=True, **({"rules": rules} if rules else {}), **options)
    if running:
        driver._take(driver.policy.set_mps(PIPE))
    return driver


def frames_to(driver: Driver, cid: int) -> list:
    return [message for to, message in driver.sent if to == cid]


def client(driver: Driver, cid: int):
    return next(c for c in driver.policy.snapshot(driver.now).clients
                if c.registration.id == cid)


def test_a_program_that_may_share_goes_through_mps_before_it_is_registered():
    driver = mps_driver()
    driver.register(1)
    assert frames_to(driver, 1) == [p.Mps(0, 0, PIPE), p.Registered(1, p.Mode.AUTO, 30)]
    assert client(driver, 1).mps and client(driver, 1).mps_why == ""
    assert any("through MPS" in log.text for log in driver.logs)


def test_without_mps_nothing_is_sent_and_nothing_is_said():
    driver = Driver(mode=p.Mode.AUTO)
    driver.register(1)
    assert frames_to(driver, 1) == [p.Registered(1, p.Mode.AUTO, 30)]
    assert (client(driver, 1).mps, client(driver, 1).mps_why) == (False, "")


def test_mode_off_shares_too_but_on_keeps_one_holder_at_a_time():
    off = mps_driver(p.Mode.OFF)
    off.register(1)
    assert isinstance(frames_to(off, 1)[0], p.Mps)
    on = mps_driver(p.Mode.ON)
    on.register(1)
    assert frames_to(on, 1) == [p.Registered(1, p.Mode.ON, 30)]
    assert client(on, 1).mps_why == mps_rules.MODE_ON


def test_a_rule_keeps_a_program_out_or_gives_its_sm_share():
    def rules(identity):
        if identity.process == "train":
            return Terms(mps=False)
        return Terms(sm_share=30)
    driver = mps_driver(rules=rules)
    driver.register(1, "train")
    driver.register(2, "infer")
    assert not any(isinstance(m, p.Mps) for m in frames_to(driver, 1))
    assert client(driver, 1).mps_why == mps_rules.RULE
    assert frames_to(driver, 2)[0] == p.Mps(30, 0, PIPE)


def test_a_rule_gives_a_low_priority_which_the_frame_carries_and_the_log_says():
    def rules(identity):
        if identity.process == "train":
            return Terms(sm_share=50, mps_priority=p.MpsPriority.LOW)
        return Terms()
    driver = mps_driver(rules=rules)
    driver.register(1, "train")
    driver.register(2, "infer")
    assert frames_to(driver, 1)[0] == p.Mps(50, p.MpsPriority.LOW, PIPE)
    assert frames_to(driver, 2)[0] == p.Mps(0, p.MpsPriority.NORMAL, PIPE)
    (train, infer) = [log.text for log in driver.logs if log.text.startswith("register ")]
    assert "through MPS (50% of the SMs, low priority)" in train
    assert "priority" not in infer


def test_its_owner_keeps_a_program_out_with_the_register_flag():
    driver = mps_driver()
    driver.register(1, flags=p.REG_NO_MPS)
    assert not any(isinstance(m, p.Mps) for m in frames_to(driver, 1))
    assert client(driver, 1).mps_why == mps_rules.OWNER


def test_another_users_program_never_waits_behind_the_mps_server():
    driver = mps_driver()
    driver.register(1, uid=1000)
    driver.register(2, uid=1001)  # would wait for every client of uid 1000 under MPS
    assert isinstance(frames_to(driver, 1)[0], p.Mps)
    assert frames_to(driver, 2) == [p.Registered(2, p.Mode.AUTO, 30)]
    assert "uid 1000" in client(driver, 2).mps_why
    driver.register(3, uid=1000)  # the same user's go on sharing the server
    assert isinstance(frames_to(driver, 3)[0], p.Mps)
    driver.disconnect(1)
    driver.disconnect(3)
    assert driver.policy.mps_user() is None
    driver.register(4, uid=1001)  # the server is free: the next user may take it
    assert isinstance(frames_to(driver, 4)[0], p.Mps)
    assert driver.policy.mps_user() == 1001


def test_a_daemon_that_stops_answering_sends_new_programs_to_plain_contexts():
    driver = mps_driver()
    driver.register(1)
    driver._take(driver.policy.set_mps(None))
    driver.register(2)
    assert not any(isinstance(m, p.Mps) for m in frames_to(driver, 2))
    assert client(driver, 2).mps_why == mps_rules.NO_DAEMON
    driver._take(driver.policy.set_mps(PIPE))
    driver.register(3)
    assert isinstance(frames_to(driver, 3)[0], p.Mps)


def test_a_daemon_that_stops_takes_its_clients_mps_state_with_it():
    driver = mps_driver()
    driver.register(1, uid=1000)
    driver.register(2, uid=1000)
    driver.register(3, uid=1000, flags=p.REG_NO_MPS)
    assert driver.policy.mps_user() == 1000
    driver._take(driver.policy.set_mps(None))
    for cid in (1, 2):  # their MPS contexts went with the server: they count as plain now
        assert (client(driver, cid).mps, client(driver, cid).mps_why) == \
            (False, mps_rules.DAEMON_DIED)
    assert client(driver, 3).mps_why == mps_rules.OWNER  # never went through it: unchanged
    assert driver.policy.mps_user() is None
    assert "the 2 that went through it no longer count as its clients" in driver.logs[-1].text
    driver._take(driver.policy.set_mps(PIPE))  # started again: another user may take it now
    driver.register(4, uid=1001)
    assert isinstance(frames_to(driver, 4)[0], p.Mps)
    assert not client(driver, 1).mps  # a daemon back does not bring old contexts back


def test_programs_through_mps_that_fit_hold_together_and_those_that_do_not_take_turns():
    driver = mps_driver(nvml={0: 10 << 30})
    for cid in (1, 2, 3):
        driver.register(cid)
    driver.mem(1, 1 << 30)
    driver.mem(2, 1 << 30)
    driver.request(1)
    driver.request(2)
    assert set(driver.policy.devices[0].holders) == {1, 2}
    driver.mem(3, 9 << 30)  # cannot fit beside them: it waits for its own turn
    driver.request(3)
    assert 3 not in driver.policy.devices[0].holders
