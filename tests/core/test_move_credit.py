"""credit.py on its own: which bytes of a reported move may teach a rate."""

from gemshare_nvs.core.rules.memory.credit import MoveCredit

G = 1 << 30


def test_moves_to_the_host_count_up_to_what_was_asked_and_use_it_up():
    credit = MoveCredit()
    assert credit.counted(0, 1, True, 4 * G) == 0  # never asked
    credit.asked_out(0, 1, 3 * G)
    credit.asked_out(0, 1, 2 * G)  # a drop, then an eviction for the rest
    assert credit.counted(0, 1, True, 4 * G) == 4 * G
    assert credit.counted(0, 1, True, 4 * G) == 1 * G
    assert credit.counted(0, 1, True, 4 * G) == 0
    assert credit.counted(0, 1, False, 4 * G) == 0  # the other way was never due


def test_a_grant_settles_what_was_asked_and_says_what_may_come_back():
    credit = MoveCredit()
    credit.asked_out(0, 1, 3 * G)
    credit.granted(0, 1, 5 * G)
    assert credit.counted(0, 1, True, 3 * G) == 0
    assert credit.counted(0, 1, False, 8 * G) == 5 * G
    assert credit.counted(0, 1, False, 8 * G) == 0
    credit.granted(0, 1, 0)
    assert credit.counted(0, 1, False, G) == 0


def test_credit_is_kept_per_device_and_client_and_forgotten_with_the_client():
    credit = MoveCredit()
    credit.asked_out(0, 1, G)
    credit.asked_out(1, 1, G)
    credit.asked_out(0, 2, G)
    credit.granted(0, 1, G)
    assert credit.counted(1, 2, True, G) == 0
    credit.forget(1)
    assert credit.counted(0, 1, False, G) == credit.counted(1, 1, True, G) == 0
    assert credit.counted(0, 2, True, G) == G
