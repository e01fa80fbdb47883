"""Reading a config file costs work in proportion to its size: the line of each key is found
without reading the file again for it, and dead rules without comparing every pair of rules; a
client's rule is then found without trying every rule before it.

The work is counted, not timed: the function calls made (Python's and C's, as sys.setprofile
sees them) for a file of N rules against one of 2N. Twice the rules may cost about twice the
calls; a search per rule through the whole file would cost four times as many.
"""

from __future__ import annotations

import sys

import pytest

from gemshare_nvs.config.parsing import MAX_LISTED_PROBLEMS, ConfigError, Names, parse
from gemshare_nvs.config.shadows import shadows
from gemshare_nvs.core.model.terms import Identity

PATH = "/etc/gemshare/gemshare.toml"
NAMES = Names(user_exists=lambda name: True, group_exists=lambda name: True)
RULES = 500
LINEAR = 2.3  # calls for 2N rules over calls for N; a quadratic reader is near 4


def rules(count: int, wildcards: bool = True) -> str:
    """A file as a large site writes one: a rule per job label, users shared among them, and
    (unless not `wildcards`) a few wildcards."""
    text = "tq = 30\n"
    for n in range(count):
        match = f'label = "job-{n}", user = "user{n % 7}"' if n % 50 or not wildcards else \
            f'pod = "batch-{n}-*"'
        text += f"\n[[rule]]\nmatch = {{ {match} }}\nweight = {1 + n % 5}\n"
    return text


def calls(work) -> int:
    """How many function calls `work()` makes."""
    count = 0

    def profile(frame, event, arg):
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    sys.setprofile(profile)
    try:
        work()
    finally:
        sys.setprofile(None)
    return count


def growth(work_for) -> float:
    return calls(work_for(2 * RULES)) / calls(work_for(RULES))


def test_parsing_grows_with_the_file_not_with_its_square():
    texts = {count: rules(count) for count in (RULES, 2 * RULES)}
    assert growth(lambda count: lambda: parse(texts[count], PATH, NAMES)) < LINEAR


def test_finding_dead_rules_grows_with_the_rules_not_with_their_square():
    configs = {count: parse(rules(count), PATH, NAMES) for count in (RULES, 2 * RULES)}
    assert growth(lambda count: lambda: shadows(configs[count])) < LINEAR


def test_a_clients_rule_is_found_without_trying_every_rule_before_it():
    configs = {count: parse(rules(count, wildcards=False), PATH, NAMES)
               for count in (RULES, 2 * RULES)}

    def last_rules_client(count: int) -> Identity:
        n = count - 1
        return Identity(uid=1000, user=f"user{n % 7}", gid=1000, group="staff",
                        process="python3", pod="", namespace="", label=f"job-{n}")

    for count, config in configs.items():
        assert config.terms(last_rules_client(count)).weight == 1 + (count - 1) % 5
    assert growth(lambda count: lambda: configs[count].terms(last_rules_client(count))) < 1.2


def bad_rules(count: int) -> str:
    return "".join(f'\n[[rule]]\nmatch = {{ label = "job-{n}" }}\nweight = -1\n'
                   for n in range(count))


def refusal(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        parse(text, PATH, NAMES)
    return caught.value


def test_a_file_with_many_problems_lists_the_first_ones_and_counts_the_rest():
    texts = {count: bad_rules(count) for count in (RULES, 2 * RULES)}
    assert growth(lambda count: lambda: refusal(texts[count])) < LINEAR
    error = refusal(texts[RULES])
    assert len(error.problems) == MAX_LISTED_PROBLEMS
    assert error.count == RULES and error.words() == f"{RULES} problems"
    assert error.problems[0].line == 4 and error.problems[0].key == "rule 1 weight"
    assert error.lines()[-1] == (f"{PATH}: {RULES - MAX_LISTED_PROBLEMS} more problems past "
                                 f"the first {MAX_LISTED_PROBLEMS}, not listed")
