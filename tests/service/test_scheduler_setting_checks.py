"""settings.py's checks on their own: bounds are inclusive and the message says what is wanted."""

import pytest

from gemshare_nvs.config.settings import CONTEXT_RESERVE_MIB, MAX_CLIENTS, TQ, check_mode
from gemshare_nvs.protocol import Mode


@pytest.mark.parametrize("number, low, high", [(TQ, 1, 86400), (CONTEXT_RESERVE_MIB, 0, 1 << 20)])
def test_a_whole_number_is_taken_at_both_bounds_and_refused_past_them(number, low, high):
    assert (number.check(low), number.check(high)) == (low, high)
    for value in (low - 1, high + 1):
        with pytest.raises(ValueError, match=f"from {low} to {high}, not {value}"):
            number.check(value)


@pytest.mark.parametrize("value", [True, 2.0, "30", None])
def test_anything_but_an_int_is_refused(value):
    with pytest.raises(ValueError, match="tq must be a whole number of seconds from 1 to 86400"):
        TQ.check(value)


def test_a_number_of_nothing_in_particular_names_no_unit():
    with pytest.raises(ValueError, match="^max clients must be a whole number from 1 to 65536, "
                                         "not 0$"):
        MAX_CLIENTS.check(0)


def test_a_long_refused_value_is_quoted_short():
    assert len(str(TQ.refusal("9" * 1000))) < 120


def test_modes_are_taken_by_their_labels_only():
    assert check_mode("auto") is Mode.AUTO
    with pytest.raises(ValueError, match="one of on, off, auto, not 'ON'"):
        check_mode("ON")
