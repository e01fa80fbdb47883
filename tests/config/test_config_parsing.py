"""config.parse: what a good file gives, and every kind of bad input refused with its line and
key (tomllib gives no lines: config_lines.py finds them in the text)."""

from __future__ import annotations

import textwrap

import pytest

from gemshare_nvs.config.parsing import ConfigError, Names, parse
from gemshare_nvs.core.model.terms import Identity
from gemshare_nvs.protocol import Mode, MpsPriority

PATH = "/etc/gemshare/gemshare.toml"
# Names that exist here whatever machine runs the tests.
NAMES = Names(user_exists=lambda name: name in ("alice", "bob"),
              group_exists=lambda name: name == "ml")

EXAMPLE = """\
tq = 30
anti_thrash = "on"
min_slice_ms = 300

[[rule]]
match = { label = "notebook" }          # all keys of one match must hold
weight = 2

[[rule]]
match = { user = "alice", process = "python3" }
memory_limit = "16GiB"
gpu_limit = 0.5
"""


def parsed(text: str):
    return parse(textwrap.dedent(text), PATH, NAMES)


def refusal(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        parsed(text)
    return caught.value


def test_the_documented_example_gives_its_settings_and_rules_in_order():
    config = parsed(EXAMPLE)
    assert config.settings == {"tq": 30, "anti_thrash": Mode.ON, "min_slice_ms": 300}
    assert config.setting_lines == {"tq": 1, "anti_thrash": 2, "min_slice_ms": 3}
    first, second = config.rules
    assert (first.number, first.line, first.match, dict(first.values)) == \
        (1, 5, (("label", "notebook"),), {"weight": 2.0})
    assert (second.line, dict(second.match)) == (9, {"user": "alice", "process": "python3"})
    assert dict(second.values) == {"memory_limit": 16 << 30, "gpu_limit": 0.5}
    assert second.source == f"config rule 2 ({PATH}:9)"
    assert config.source("tq") == f"config ({PATH}:1)"


def test_an_empty_file_is_valid_and_gives_nothing():
    config = parsed("# nothing yet\n")
    assert (config.settings, config.rules) == ({}, ())


def test_every_setting_the_command_line_has_may_be_given():
    config = parsed("""\
        grace_ms = 5000
        capacity_mib = 4096
        context_reserve_mib = 0
        staging_max_mib = 8192
        anti_thrash = "auto"
        mps = true
        mps_pipe_directory = "/run/nvidia-mps"
    """)
    assert config.settings == {"grace_ms": 5000, "capacity_mib": 4096, "context_reserve_mib": 0,
                               "staging_max_mib": 8192, "anti_thrash": Mode.AUTO, "mps": True,
                               "mps_pipe_directory": "/run/nvidia-mps"}


def test_a_rule_gives_the_mps_terms():
    (rule,) = parsed("""\
        [[rule]]
        match = { label = "inference" }
        sm_share = 30
        mps = true
        mps_priority = "normal"
    """).rules
    assert dict(rule.values) == {"sm_share": 30, "mps": True,
                                 "mps_priority": MpsPriority.NORMAL}


def test_a_rule_gives_a_low_mps_priority_and_others_keep_the_normal_one():
    config = parsed("""\
        [[rule]]
        match = { label = "trainer" }
        mps_priority = "low"
    """)
    trainer = config.terms(Identity(1000, "bob", 100, "users", "python3", "", "", "trainer"))
    assert (trainer.mps_priority, trainer.source("mps_priority")) == \
        (MpsPriority.LOW, f"config rule 1 ({PATH}:1)")
    other = config.terms(Identity(1000, "bob", 100, "users", "python3", "", "", "notebook"))
    assert (other.mps_priority, other.source("mps_priority")) == (MpsPriority.NORMAL, "default")


def test_a_match_may_be_its_own_table_and_take_every_key():
    config = parsed("""\
        [[rule]]
        weight = 3
        [rule.match]
        uid = 1000
        gid = 1000
        user = "bob"
        group = "ml"
        process = "python3"
        pod = "train-*"
        namespace = "batch"
        label = "nightly"
    """)
    (rule,) = config.rules
    assert dict(rule.match)["pod"] == "train-*" and len(rule.match) == 8


@pytest.mark.parametrize("text, line, key, words", [
    # settings: wrong values, wrong types, unknown keys
    ("tq = 0\n", 1, "tq", "tq must be a whole number of seconds from 1 to 86400, not 0"),
    ("tq = 30\ntq_s = 5\n", 2, "tq_s", "unknown setting 'tq_s' (did you mean 'tq'?)"),
    ("\n\ntq = \"30\"\n", 3, "tq", "not '30'"),
    ("anti_thrash = true\n", 1, "anti_thrash", "one of on, off, auto, not True"),
    ("min_slice_ms = 1.5\n", 1, "min_slice_ms", "whole number"),
    ("[server]\nport = 1\n", 1, "server", "unknown setting 'server'"),
    ("[[rules]]\nweight = 1\n", 1, "rules", "(did you mean 'rule'?)"),
    # rule terms
    (EXAMPLE.replace("weight = 2", "weight = 0"), 7, "rule 1 weight",
     "weight must be a number greater than 0"),
    (EXAMPLE.replace("weight = 2", "weight = -1"), 7, "rule 1 weight", "not -1"),
    (EXAMPLE.replace("weight = 2", "weight = \"2\""), 7, "rule 1 weight", "not '2'"),
    (EXAMPLE.replace("0.5", "1.5"), 12, "rule 2 gpu_limit",
     "gpu_limit must be a number greater than 0 and at most 1, not 1.5"),
    (EXAMPLE.replace("0.5", "0"), 12, "rule 2 gpu_limit", "not 0"),
    (EXAMPLE.replace("16GiB", "16 gigs"), 11, "rule 2 memory_limit",
     "memory_limit must be a size such as 16GiB or 512MiB"),
    (EXAMPLE.replace("\"16GiB\"", "0"), 11, "rule 2 memory_limit", "not 0"),
    (EXAMPLE.replace("weight = 2", "sm_share = 0"), 7, "rule 1 sm_share",
     "sm_share must be a whole number of percent from 1 to 100, not 0"),
    (EXAMPLE.replace("weight = 2", "sm_share = 101"), 7, "rule 1 sm_share", "not 101"),
    (EXAMPLE.replace("weight = 2", "sm_share = \"half\""), 7, "rule 1 sm_share", "not 'half'"),
    (EXAMPLE.replace("weight = 2", "sm_share = 50.5"), 7, "rule 1 sm_share", "not 50.5"),
    (EXAMPLE.replace("weight = 2", "mps = \"yes\""), 7, "rule 1 mps",
     "mps must be true or false, not 'yes'"),
    (EXAMPLE.replace("weight = 2", "mps = 0"), 7, "rule 1 mps", "not 0"),
    (EXAMPLE.replace("weight = 2", "mps_priority = \"high\""), 7, "rule 1 mps_priority",
     "mps_priority must be one of normal, low, not 'high'"),
    (EXAMPLE.replace("weight = 2", "mps_priority = 1"), 7, "rule 1 mps_priority", "not 1"),
    (EXAMPLE.replace("weight = 2", "mps_priority = true"), 7, "rule 1 mps_priority",
     "not True"),
    (EXAMPLE.replace("weight = 2", "mps_priority = \"Low\""), 7, "rule 1 mps_priority",
     "not 'Low'"),
    ("mps = \"on\"\n", 1, "mps", "mps must be true or false, not 'on'"),
    ("mps_pipe_directory = \"run/mps\"\n", 1, "mps_pipe_directory",
     "mps_pipe_directory must be an absolute path"),
    (EXAMPLE.replace("gpu_limit", "gpu_limt"), 12, "rule 2 gpu_limt",
     "unknown key 'gpu_limt' (did you mean 'gpu_limit'?); a rule takes match, weight"),
    # matches that match nothing, or cannot be read
    (EXAMPLE.replace("match = { label = \"notebook\" }", ""), 5, "rule 1 match",
     "a rule must say which clients it is for"),
    (EXAMPLE.replace("{ label = \"notebook\" }", "{}"), 6, "rule 1 match",
     "must be a table of one or more of uid"),
    (EXAMPLE.replace("{ label = \"notebook\" }", "\"notebook\""), 6, "rule 1 match",
     "must be a table"),
    (EXAMPLE.replace("\"alice\"", "\"carol\""), 10, "rule 2 match.user",
     "no user named 'carol' on this system, so the rule would match nothing"),
    (EXAMPLE.replace("user = \"alice\"", "group = \"wheel\""), 10, "rule 2 match.group",
     "no group named 'wheel'"),
    (EXAMPLE.replace("python3", "python3-with-a-long-name"), 10, "rule 2 match.process",
     "longer than any process a client can report (15 characters)"),
    (EXAMPLE.replace("label = ", "lable = "), 6, "rule 1 match.lable",
     "(did you mean 'label'?)"),
    (EXAMPLE.replace("\"alice\"", "1000"), 10, "rule 2 match.user", "must be text, not 1000"),
    (EXAMPLE.replace("user = \"alice\"", "uid = -1"), 10, "rule 2 match.uid",
     "uid must be a whole number from 0"),
    # rules written as something other than [[rule]] tables
    ("[rule]\nweight = 1\n", 1, "rule", "`[rule]` declares one table; rules are `[[rule]]`"),
    ("[rule.match]\nlabel = 'a'\n", 1, "rule", "`[rule]` declares one table"),
    ("tq = 5\nrule = 3\n", 2, "rule", "rules are written as [[rule]] tables"),
])
def test_bad_input_is_refused_with_its_line_and_key(text, line, key, words):
    error = refusal(text)
    assert (error.line, error.key) == (line, key), error
    assert words in error.message, error.message
    assert str(error).startswith(f"{PATH}:{line}: {key}: ")


def test_every_problem_is_listed_in_file_order():
    error = refusal("""\
        tq = 0
        [[rule]]
        match = { user = "nobody-here" }
        weight = 0
        [[rule]]
        weight = 1
    """)
    assert [(p.line, p.key) for p in error.problems] == [
        (1, "tq"), (3, "rule 1 match.user"), (4, "rule 1 weight"), (5, "rule 2 match")]
    assert len(error.lines()) == 4 and all(line.startswith(f"{PATH}:") for line in error.lines())


def test_the_nth_rule_is_found_whatever_the_rules_before_it_hold():
    error = refusal("""\
        [[rule]]
        match = { label = "a" }
        weight = 1

        [[rule]]
        # a comment
        match = { label = "b" }

        weight = 2
        gpu_limit = 2
    """)
    assert (error.line, error.key) == (10, "rule 2 gpu_limit")


def test_a_key_inside_a_match_table_is_found_on_its_own_line():
    error = refusal("""\
        [[rule]]
        weight = 1
        [rule.match]
        label = "a"
        user = "nobody-here"
    """)
    assert (error.line, error.key) == (5, "rule 1 match.user")


def test_rules_written_as_an_inline_array_point_at_the_array():
    error = refusal("""\
        tq = 5
        rule = [{ match = { label = "a" }, weight = 0 }]
    """)
    assert (error.line, error.key) == (2, "rule 1 weight")


def test_toml_that_does_not_parse_is_refused_with_its_line():
    error = refusal("tq = 30\n[[rule]\nweight = 2\n")
    assert error.line == 2 and error.key == ""
    assert error.message.startswith("not valid TOML: ") and "line" not in error.message
    assert str(error).startswith(f"{PATH}:2: not valid TOML")


@pytest.mark.parametrize("text, line", [
    ('[[rule]]\nmatch = { label = "a" }\n\n[rule]\nmatch = { label = "b" }\n', 4),
    ('[rule]\nmatch = { label = "a" }\n[[rule]]\nmatch = { label = "b" }\n', 1),
    ('tq = 5\n[ rule ]  # one rule\nweight = 2\n[[rule]]\nweight = 1\n', 2),
])
def test_a_rule_table_beside_rules_gets_the_bracket_hint_at_its_header(text, line):
    """TOML refuses the mix in its own words; the problem is pointed at the `[rule]` line."""
    error = refusal(text)
    assert (error.line, error.key) == (line, "rule"), error
    assert error.message.startswith("`[rule]` declares one table; rules are `[[rule]]`, each "
                                    "with two brackets (TOML: "), error.message


def test_other_bad_toml_beside_rules_gets_no_bracket_hint():
    error = refusal('[[rule]]\nmatch = { label = "a" }\nweight = = 2\n')
    assert error.key == "" and "brackets" not in error.message


def test_a_long_unknown_key_is_quoted_short():
    error = refusal(f"{'x' * 500} = 1\n")
    assert len(error.message) < 300  # the key cut short; the rest lists the keys a file takes
    assert "x" * 100 not in error.message
