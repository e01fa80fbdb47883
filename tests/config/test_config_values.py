"""The checks a rule's terms and gemsharectl's client options share (settings.py): weights,
fractions and sizes, each refused in words that say what is wanted."""

from __future__ import annotations

import pytest

from gemshare_nvs.config.settings import GPU_LIMIT, MEMORY_LIMIT, WEIGHT


@pytest.mark.parametrize("text, count", [
    ("16GiB", 16 << 30), ("16 GiB", 16 << 30), ("16gib", 16 << 30), ("512MiB", 512 << 20),
    ("1.5G", 3 << 29), ("8g", 8 << 30), ("2TiB", 2 << 40), ("1024k", 1 << 20),
    ("4GB", 4 * 10 ** 9), ("2MB", 2 * 10 ** 6), ("1048576", 1 << 20), (1 << 30, 1 << 30)])
def test_sizes_in_binary_and_decimal_units(text, count):
    assert MEMORY_LIMIT.check(text) == count


@pytest.mark.parametrize("value", [
    "16XB", "GiB", "", "-1GiB", "1e9", "16 Gi B", "0", "1KiB", 0, -5, 1.5, True, None,
    "9" * 400 + "GiB", "2000TiB"])
def test_sizes_that_do_not_parse_or_are_out_of_bounds_are_refused(value):
    with pytest.raises(ValueError, match="memory_limit must be a size such as 16GiB or 512MiB, "
                                         "from 1 MiB to 1024 TiB, not "):
        MEMORY_LIMIT.check(value)


def test_a_fraction_is_above_0_and_at_most_1():
    assert (GPU_LIMIT.check(1), GPU_LIMIT.check(0.01)) == (1.0, 0.01)
    for value in (0, -0.5, 1.01, float("nan"), float("inf"), "0.5", True, None):
        with pytest.raises(ValueError, match="gpu_limit must be a number greater than 0 and at "
                                             "most 1, not "):
            GPU_LIMIT.check(value)


def test_a_weight_is_any_positive_number_up_to_a_million():
    assert (WEIGHT.check(2), WEIGHT.check(0.1), WEIGHT.check(1_000_000)) == (2.0, 0.1, 1e6)
    for value in (0, -1, 1_000_001, float("nan"), "2", False):
        with pytest.raises(ValueError, match="^weight must be a number greater than 0 and at "
                                             "most 1000000, not "):
            WEIGHT.check(value)
