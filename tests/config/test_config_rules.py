"""Config.terms: the first rule whose every match key holds gives a client's terms, with the
rule named as their source; a client no rule matches gets the defaults. The rules are looked up
by their values (rules.py), never in another order than the file's."""

from __future__ import annotations

import textwrap

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gemshare_nvs.config.parsing import Names, parse
from gemshare_nvs.core.model.terms import Identity, Terms

PATH = "/etc/gemshare/gemshare.toml"
NAMES = Names(user_exists=lambda name: name in ("alice", "bob"),
              group_exists=lambda name: name in ("ml", "staff"))
RULES = parse(textwrap.dedent("""\
    [[rule]]
    match = { user = "alice", process = "python3" }
    memory_limit = "16GiB"
    gpu_limit = 0.5

    [[rule]]
    match = { label = "notebook" }
    weight = 2

    [[rule]]
    match = { namespace = "batch", pod = "train-*" }
    weight = 0.5

    [[rule]]
    match = { uid = 1001, group = "ml" }
    gpu_limit = 0.25

    [[rule]]
    match = { gid = 50 }
    weight = 3
"""), PATH, NAMES)


def client(uid=1000, user="carol", gid=100, group="users", process="bash", pod="",
           namespace="", label="") -> Identity:
    return Identity(uid, user, gid, group, process, pod, namespace, label)


def test_every_key_of_a_match_must_hold():
    assert RULES.terms(client(user="alice", process="python3")).gpu_limit == 0.5
    assert RULES.terms(client(user="alice", process="bash")) == Terms()
    assert RULES.terms(client(user="bob", process="python3")) == Terms()


def test_the_first_matching_rule_wins_and_gives_only_its_terms():
    # alice's notebook matches rules 1 and 2: rule 1 gives limits, and the weight stays 1.
    terms = RULES.terms(client(user="alice", process="python3", label="notebook"))
    assert (terms.weight, terms.gpu_limit, terms.memory_limit) == (1.0, 0.5, 16 << 30)
    assert terms.source("gpu_limit") == f"config rule 1 ({PATH}:1)"  # its [[rule]] line
    assert terms.source("weight") == "default"
    assert RULES.terms(client(label="notebook")).weight == 2


def test_a_client_no_rule_matches_gets_the_defaults():
    terms = RULES.terms(client())
    assert terms == Terms()
    assert all(terms.source(name) == "default" for name in ("weight", "gpu_limit"))


@pytest.mark.parametrize("pod, namespace, matches", [
    ("train-7f9c-x2", "batch", True), ("train-", "batch", True),
    ("eval-1", "batch", False), ("train-1", "default", False), ("", "batch", False)])
def test_text_keys_take_shell_wildcards(pod, namespace, matches):
    assert (RULES.terms(client(pod=pod, namespace=namespace)).weight == 0.5) is matches


def test_ids_and_names_match_exactly():
    assert RULES.terms(client(uid=1001, group="ml")).gpu_limit == 0.25
    assert RULES.terms(client(uid=1001, group="staff")) == Terms()
    assert RULES.terms(client(uid=1002, group="ml")) == Terms()
    assert RULES.terms(client(gid=50)).weight == 3


def test_a_label_is_matched_as_given_not_as_a_prefix():
    assert RULES.terms(client(label="notebook2")) == Terms()
    assert RULES.terms(client(label="Notebook")) == Terms()


# Small alphabets, so that rules and clients often meet.
TEXTS = st.sampled_from(["a", "b", "ab", "*", "a*", "?", "[ab]", ""])
MATCHES = st.dictionaries(
    st.sampled_from(["uid", "gid", "user", "group", "process", "pod", "namespace", "label"]),
    st.integers(0, 2), min_size=1)


def rule_text(number: int, match: dict) -> str:
    """A [[rule]] table: ids as numbers, names as alice or bob, text keys from TEXTS."""
    words = []
    for key, pick in match.items():
        if key in ("uid", "gid"):
            words.append(f"{key} = {pick}")
        elif key in ("user", "group"):
            words.append(f'{key} = "{("alice", "bob", "alice")[pick]}"')
        else:
            words.append(f'{key} = "{("a", "*", "a*")[pick]}"')
    return f"[[rule]]\nmatch = {{ {', '.join(words)} }}\nweight = {number}\n"


@given(st.lists(MATCHES, max_size=12), st.integers(0, 2), st.integers(0, 2),
       st.sampled_from(["alice", "bob"]), TEXTS, TEXTS, TEXTS, TEXTS)
def test_the_rule_found_is_the_first_in_file_order_that_matches(matches, uid, gid, user, process,
                                                                pod, namespace, label):
    config = parse("".join(rule_text(n, m) for n, m in enumerate(matches, 1)), PATH,
                   Names(user_exists=lambda name: True, group_exists=lambda name: True))
    identity = Identity(uid=uid, user=user, gid=gid, group=user, process=process, pod=pod,
                        namespace=namespace, label=label)
    first = next((rule for rule in config.rules if rule.matches(identity)), None)
    assert config.terms(identity) == (Terms() if first is None else
                                      Terms().with_values(dict(first.values), first.source))
