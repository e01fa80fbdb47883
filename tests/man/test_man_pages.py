"""The man pages man/manpage.py makes (make man): one per installed command, each naming every
option and subcommand the command's --help lists, in roff that man renders without a warning
and that prints the help's own words (dots, quotes, backslashes and hyphens included)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer
import typer.main
from installed_commands import COMMANDS

REPO = Path(__file__).resolve().parents[2]
GENERATOR = REPO / "man" / "manpage.py"
# How each command runs from this Python, for its --help.
RUN = {"gemshare-scheduler": ["-m", "gemshare_nvs.daemon"], "gemsharectl": ["-m", "gemshare_ctl"],
       "gemshare-device-plugin": ["-m", "gemshare_plugin"],
       "gemshare-dra-plugin": ["-m", "gemshare_dra"],
       "gemshare-node-identity": ["-m", "gemshare_nvs.identity_daemon"]}
# The requests and macros a page may use: the man macros' own, nothing of groff's alone.
MACROS = {"TH", "SH", "SS", "TP", "PP", "BR", "nf", "fi", "ad", "nh"}
GROFF = shutil.which("groff")


def load_generator():
    spec = importlib.util.spec_from_file_location("manpage", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


manpage = load_generator()


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, str]:
    """What `make man` writes: the generator run as the Makefile runs it."""
    folder = tmp_path_factory.mktemp("man")
    made = subprocess.run([sys.executable, str(GENERATOR), str(folder)], capture_output=True,
                          text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    return {path.name.removesuffix(".1"): path.read_text() for path in folder.glob("*.1")}


def roff(text: str) -> str:
    """How a name is written in a page's source: every hyphen as \\-."""
    return text.replace("-", "\\-")


def rendered(source: str, tmp_path: Path) -> str:
    """The page as plain text, lines long enough that nothing is broken."""
    path = tmp_path / "page.1"
    path.write_text(source)
    done = subprocess.run([GROFF, "-man", "-Tascii", "-P-cbou", "-rLL=250n", "-ww", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    return done.stdout


def walk(command, path: str):
    """(command path, click command, its context) for a command and every visible subcommand."""
    context = command.context_class(command, info_name=path.rsplit(" ", 1)[-1],
                                    **command.context_settings)
    yield path, command, context
    if hasattr(command, "list_commands"):
        for name in command.list_commands(context):
            sub = command.get_command(context, name)
            if not sub.hidden:
                yield from walk(sub, f"{path} {name}")


def test_every_installed_command_has_a_page(pages):
    assert set(pages) == set(manpage.COMMANDS) == COMMANDS


def section(page: str, program: str, path: str) -> str:
    """What a page says of one command: the top command's OPTIONS, a subcommand's .SS."""
    if path == program:
        start = page.index(".SH OPTIONS\n")
    else:
        start = page.index(f'.SS "{roff(path.partition(" ")[2])}"\n')
    ends = [page.find(end, start + 1) for end in ("\n.SS ", "\n.SH ")]
    return page[start:min([end for end in ends if end > 0], default=len(page))]


@pytest.mark.parametrize("program", sorted(RUN))
def test_a_page_names_every_option_and_subcommand_of_the_command(pages, program):
    for path, command, context in walk(manpage.click_command(program), program):
        told = section(pages[program], program, path)
        for param in command.get_params(context):
            if getattr(param, "hidden", False):
                continue
            if param.param_type_name == "argument":  # by the name its help shows, PID
                shown = [roff(param.get_help_record(context)[0])]
            else:
                shown = [f"\\fB{roff(name)}\\fR" for name in param.opts + param.secondary_opts]
            for name in shown:
                assert name in told, f"{path}: {name}"


def help_options(program: str, subcommand: list[str]) -> set[str]:
    """The option names the real command's --help prints, at a width that cuts none."""
    shown = subprocess.run([sys.executable, *RUN[program], *subcommand, "--help"],
                           capture_output=True, text=True, timeout=60, cwd=REPO,
                           env={**os.environ, "COLUMNS": "200", "TERM": "dumb"})
    assert shown.returncode == 0, shown.stderr
    return set(re.findall(r"(?<![\w-])--?[a-z][a-z-]*", shown.stdout))


@pytest.mark.parametrize("program", sorted(RUN))
def test_what_help_prints_is_in_the_page(pages, program):
    """Against the command's output, not its definition: an option --help shows and the page
    left out (a help option of another name, an option added outside Typer) fails here."""
    for path, _, _ in walk(manpage.click_command(program), program):
        # The top command's help also lists its subcommands and its epilog: the whole page.
        told = pages[program] if path == program else section(pages[program], program, path)
        for name in help_options(program, path.split()[1:]):
            assert roff(name) in told, f"{path} --help shows {name}"


def macro_lines(page: str) -> list[str]:
    return [line for line in page.splitlines() if line.startswith((".", "'"))]


@pytest.mark.parametrize("program", sorted(RUN))
def test_a_page_is_a_man_page_in_plain_roff(pages, program):
    page = pages[program]
    first, *_ = page.splitlines()
    assert first.startswith(f'.TH "{roff(program.upper())}" 1 '), first
    sections = re.findall(r'^\.SH "?([^"\n]+)"?$', page, re.M)
    assert sections[:4] == ["NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS"], sections
    assert re.search(rf"^{re.escape(roff(program))} \\- \S", page, re.M)  # the whatis line
    for line in macro_lines(page):
        assert line[0] == "." and line[1:].split(" ")[0] in MACROS, line
    # Text lines never open with a dot or a quote (roff would take them for requests), and every
    # hyphen is \- (a page's options must copy as typed).
    assert not [line for line in page.splitlines() if re.search(r"(?<!\\)-", line)]
    assert page.isascii()


@pytest.mark.skipif(GROFF is None, reason="groff is not installed")
@pytest.mark.parametrize("program", sorted(RUN))
def test_man_renders_a_page_without_warnings(pages, program, tmp_path):
    text = rendered(pages[program], tmp_path)
    assert re.search(rf"^\s+{re.escape(program)} - \S", text, re.M), text[:500]
    if shutil.which("man"):  # as a user reads it, with man's own warnings asked for
        path = tmp_path / f"{program}.1"
        path.write_text(pages[program])
        shown = subprocess.run(["man", "--warnings", "-l", str(path)], capture_output=True,
                               text=True, timeout=60, env={**os.environ, "MANWIDTH": "80"})
        assert (shown.returncode, shown.stderr) == (0, ""), shown.stderr
        assert "SYNOPSIS" in shown.stdout


AWKWARD_HELP = (".starts with a dot, as roff requests do\n\n'quoted' words, a back\\slash, "
                "--double-dash and \u00d7 outside ASCII")


@pytest.mark.skipif(GROFF is None, reason="groff is not installed")
def test_help_text_that_roff_would_misread_prints_as_written(tmp_path):
    app = typer.Typer(rich_markup_mode=None)

    @app.command(help=AWKWARD_HELP)
    def awkward(odd_name: str = typer.Option("x", "--odd-name",
                                             help=".a dot first; 'quoted' too")) -> None:
        pass

    text = " ".join(rendered(manpage.page("awkward", typer.main.get_command(app)),
                             tmp_path).split())
    assert ".starts with a dot, as roff requests do" in text
    assert "'quoted' words, a back\\slash, --double-dash and" in text
    assert re.search(r"--odd-name \S+ \.a dot first; 'quoted' too \[default: x\]", text), text
