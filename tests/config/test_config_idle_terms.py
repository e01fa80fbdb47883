"""config_idle_terms: terms and settings that do nothing where they are given are found, each in
one line that says why; with the settings that make them work, nothing is said. The scheduler
warns of them as it starts, and a config file's `mps_pipe_directory` implies `mps`."""

from __future__ import annotations

from pathlib import Path

from gemshare_nvs.config.idle_terms import idle_terms
from gemshare_nvs.config.layers import Layers, command_line_layer
from gemshare_nvs.config.parsing import parse
from gemshare_nvs.config.settings import Settings

PATH = "/etc/gemshare/gemshare.toml"


def found(text: str, **values) -> list[str]:
    """What idle_terms says of a file, with the file's own settings and `values` over them."""
    config = parse(text, PATH)
    settings = {**config.settings, **values}
    sources = {name: config.source(name) for name in config.settings}
    return idle_terms(config, settings, sources)


def rule(terms: str, match: str = 'label = "x"') -> str:
    return f"\n[[rule]]\nmatch = {{ {match} }}\n{terms}\n"


def test_sm_share_and_mps_priority_beside_mps_false_do_nothing():
    (line,) = found(rule('mps = false\nsm_share = 50\nmps_priority = "low"'))
    assert line == (f"{PATH}:2: rule 1: sm_share and mps_priority do nothing: the rule's "
                    "mps = false keeps its programs out of MPS, where alone they apply; remove "
                    "one or the other")
    (line,) = found(rule("sm_share = 50") + rule("mps = false\nsm_share = 20", 'uid = 7'))
    assert line.startswith(f"{PATH}:6: rule 2: sm_share does nothing:")
    assert found(rule("mps = true\nsm_share = 50") + rule("mps = false", 'uid = 7')) == []


def test_with_mps_off_every_mps_term_and_the_pipe_directory_do_nothing():
    text = "mps = false\nmps_pipe_directory = \"/run/theirs\"\n" + \
        rule("sm_share = 50\nweight = 2") + rule("mps = false", "uid = 7")
    assert found(text) == [
        f"{PATH}:4: rule 1: sm_share does nothing: the scheduler runs no MPS: mps = false "
        f"(at {PATH}:1)",
        f"{PATH}:9: rule 2: mps does nothing: the scheduler runs no MPS: mps = false "
        f"(at {PATH}:1)",
        f'mps_pipe_directory = "/run/theirs" (at {PATH}:2) does nothing: the scheduler runs '
        f"no MPS: mps = false (at {PATH}:1)"]


def test_mps_with_anti_thrash_on_puts_nobody_through_it():
    (line,) = found('mps = true\nanti_thrash = "on"\n')
    assert line == (f'mps = true (at {PATH}:1) puts no program through MPS: anti_thrash = "on" '
                    f"(at {PATH}:2) keeps one program on a GPU at a time; use anti_thrash "
                    '"auto" (or "off") to share GPUs through MPS')
    assert found('mps = true\nanti_thrash = "auto"\n') == []


def test_mps_with_a_rule_that_keeps_every_program_out_puts_nobody_through_it():
    keeps_out = rule("mps = false", 'uid = 7') + rule("mps = false", 'process = "*"')
    (line,) = found("mps = true\n" + keeps_out)
    assert line == (f"mps = true (at {PATH}:1) puts no program through MPS: {PATH}:7: rule 2 "
                    "matches every program the rules before it leave, and says mps = false, as "
                    "they all do")
    # A rule before it lets some through; or the catch-all lets them through.
    assert found("mps = true\n" + rule("sm_share = 50", 'uid = 7') +
                 rule("mps = false", 'process = "*"')) == []
    assert found("mps = true\n" + rule("mps = false", 'uid = 7') + rule("weight = 2",
                                                                        'process = "*"')) == []


def test_anti_thrash_off_hands_out_no_lock_to_share():
    (line,) = found('anti_thrash = "off"\n' + rule("weight = 3\ngpu_limit = 0.5\nmps = true"))
    assert line == (f"{PATH}:3: rule 1: weight and gpu_limit do nothing: anti_thrash = \"off\" "
                    f"(at {PATH}:1) hands out no lock")


def test_settings_the_file_does_not_give_are_not_guessed():
    # `config check` knows only the file: MPS may well be on from the command line.
    assert found(rule("sm_share = 50\nmps_priority = \"low\"")) == []
    assert found("mps = true\n") == []


def test_a_value_is_quoted_with_its_control_characters_escaped():
    (line,) = found('mps = false\nmps_pipe_directory = "/run/a\\nINFO forged"\n')
    assert line.startswith('mps_pipe_directory = "/run/a\\nINFO forged" (at ')
    assert "\n" not in line


def test_a_pipe_directory_in_the_file_implies_mps_as_its_option_does():
    layers = Layers(command_line_layer(Settings(socket=Path("/run/gemshare/s.sock"))),
                    parse('mps_pipe_directory = "/run/theirs"\n', PATH))
    assert (layers.value("mps"), layers.source("mps")) == (True, f"config ({PATH}:1)")
    layers.config = parse('mps_pipe_directory = "/run/theirs"\nmps = false\n', PATH)
    assert (layers.value("mps"), layers.source("mps")) == (False, f"config ({PATH}:2)")
    layers.config = parse("tq = 5\n", PATH)
    assert (layers.value("mps"), layers.source("mps")) == (False, "default")


def test_the_scheduler_warns_at_start_with_the_settings_in_force(scheduler_factory,
                                                                short_tmp_dirs):
    directory = short_tmp_dirs()
    (directory / "gemshare.toml").write_text(rule("sm_share = 50"))
    running = scheduler_factory(directory=directory, mps=True, anti_thrash="on",
                                env={"PATH": "/usr/bin:/bin"})
    warned = [line for line in running.log().splitlines() if "WARNING" in line]
    assert any('mps = true (on the command line) puts no program through MPS: anti_thrash = '
               '"on" (on the command line) keeps one program on a GPU at a time' in line
               for line in warned), warned
    assert not any("sm_share" in line for line in warned), warned  # MPS runs: it may apply
    running.stop()
    plain = scheduler_factory(directory=directory, anti_thrash="auto")
    assert "rule 1: sm_share does nothing: the scheduler runs no MPS: mps = false (by " \
           "default)" in plain.log()
