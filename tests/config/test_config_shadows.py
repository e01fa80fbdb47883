"""config_shadows: a rule that an earlier rule leaves no client for is found, with both rules'
lines; rules that some client could still reach are not."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gemshare_nvs.config.parsing import Names, parse
from gemshare_nvs.config.shadows import _covers, shadows

PATH = "/etc/gemshare/gemshare.toml"
NAMES = Names(user_exists=lambda name: name in ("alice", "bob"),
              group_exists=lambda name: name == "ml")


def rules(*matches: str) -> str:
    """A file of one rule per match, each two lines long after a blank line."""
    return "".join(f"\n[[rule]]\nmatch = {{ {match} }}\nweight = 2\n" for match in matches)


def dead(*matches: str) -> list[tuple[int, int]]:
    """(rule that can never match, rule that takes its clients), by number."""
    return [(shadow.rule.number, shadow.by.number)
            for shadow in shadows(parse(rules(*matches), PATH, NAMES))]


def test_a_rule_whose_match_holds_wherever_an_earlier_ones_does_is_found():
    assert dead('label = "nb"', 'label = "nb", user = "alice"') == [(2, 1)]
    assert dead('uid = 7, process = "py"', 'process = "py", uid = 7, gid = 3') == [(2, 1)]
    assert dead('label = "nb"', 'label = "nb"') == [(2, 1)]  # the same match twice


def test_a_catch_all_shadows_every_rule_after_it():
    assert dead('process = "*"', 'label = "nb"', 'uid = 0') == [(2, 1), (3, 1)]
    assert dead('uid = 5', 'pod = "*", namespace = "*"', 'user = "bob"') == [(3, 2)]


def test_a_wildcard_takes_the_literal_values_it_matches():
    assert dead('pod = "train-*"', 'pod = "train-1", namespace = "batch"') == [(2, 1)]
    assert dead('process = "py*"', 'process = "python3"') == [(2, 1)]


@pytest.mark.parametrize("matches", [
    ('label = "nb", user = "alice"', 'label = "nb"'),  # the later rule is the broader one
    ('label = "nb"', 'label = "trainer"'),
    ('pod = "train-*"', 'pod = "train-1*"'),  # a pattern under a pattern is not worked out
    ('pod = "train-*"', 'pod = "infer-1"'),
    ('uid = 1000', 'user = "alice"'),  # the same account, perhaps: not looked up
    ('process = "python3"', 'process = "py*"'),
])
def test_rules_some_client_can_still_reach_are_not_warned_about(matches):
    assert dead(*matches) == []


def test_the_warning_names_both_rules_and_their_lines():
    (shadow,) = shadows(parse(rules('process = "*"', 'label = "nb"'), PATH, NAMES))
    assert shadow.warning(PATH) == (
        f"{PATH}:6: rule 2 (line 6) can never match: rule 1 (line 2) comes first and matches "
        "every client it would; put the narrower rule first, or remove rule 2")


MATCH_VALUES = {"uid": ("1", "2"), "user": ('"alice"', '"bob"'),
                "process": ('"py"', '"*"', '"p*"'), "label": ('"nb"', '"*"', '"n?"')}


@given(st.lists(st.dictionaries(st.sampled_from(sorted(MATCH_VALUES)), st.integers(0, 2),
                                min_size=1), max_size=12))
def test_the_rule_named_is_the_first_earlier_one_that_covers(matches):
    config = parse(rules(*(", ".join(f"{key} = {MATCH_VALUES[key][pick % len(MATCH_VALUES[key])]}"
                                     for key, pick in match.items()) for match in matches)),
                   PATH, NAMES)
    expected = []
    for index, later in enumerate(config.rules):
        by = next((rule for rule in config.rules[:index] if _covers(rule, later)), None)
        if by is not None:
            expected.append((later.number, by.number))
    assert [(shadow.rule.number, shadow.by.number) for shadow in shadows(config)] == expected
