"""What the long-running commands' command lines share (the scheduler's, the device plugin's):
one Typer command with plain help and errors, and its result handed back to the caller.

Plain, not rich's boxes: their output usually ends in a journal or a pod's log, where a box
wraps a message across lines that grep then misses. The command appends what it parsed to
ctx.obj, a list: a standalone Typer run drops what the command returns.
"""

from __future__ import annotations

from typing import Optional, Sequence

import typer
import typer.main

from ..config.settings import check_pipe_directory
from ..observe.tcp_address import parse_address
from ..version import version


def plain_app(prog: str) -> typer.Typer:
    return typer.Typer(name=prog, rich_markup_mode=None, pretty_exceptions_enable=False,
                       context_settings={"help_option_names": ["-h", "--help"]})


def version_flag(prog: str):
    """--version: print `prog` and the package's version, and exit."""
    def show(wanted: bool) -> None:
        if wanted:
            typer.echo(f"{prog} {version()}")
            raise typer.Exit()
    return typer.Option(False, "--version", callback=show, is_eager=True,
                        help="print the version and exit")


def debug_flag():
    """--debug; the command ORs it with debug_from_environment()."""
    return typer.Option(False, "--debug", help="log more (also GEMSHARE_DEBUG=1)")


def tcp_address(text: Optional[str]) -> Optional[tuple[str, int]]:
    """A callback for an ADDR:PORT option: (host, port); None passes."""
    if text is None:
        return None
    try:
        return parse_address(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def checked_text(check, key: str, option: str):
    """A callback for a text option that the config file takes as `key`: checked by the same
    `check`, its message naming the option; None passes."""
    def convert(text: Optional[str]):
        if text is None:
            return None
        try:
            return check(text)
        except ValueError as exc:
            raise typer.BadParameter(str(exc).replace(key, option)) from None
    return convert


# --mps-pipe-directory DIR: an absolute path that fits the MPS frame.
pipe_directory = checked_text(check_pipe_directory, "mps_pipe_directory", "--mps-pipe-directory")


def option_names(app: typer.Typer) -> set[str]:
    """Every long option the command takes, --help aside."""
    return {name for param in typer.main.get_command(app).params for name in param.opts
            if name.startswith("--")}


def parse(app: typer.Typer, prog: str, argv: Sequence[str]):
    """What a command line gives, for checking one. A bad command line raises Typer's usage
    error, whose message names the option and the value."""
    parsed: list = []
    typer.main.get_command(app).main(args=list(argv), prog_name=prog, standalone_mode=False,
                                     obj=parsed)
    if not parsed:
        raise ValueError(f"{' '.join(argv)!r} prints something and exits: it starts no {prog}")
    return parsed[0]


def read(app: typer.Typer, prog: str, argv: Optional[Sequence[str]] = None):
    """What this process's command line gives, else the process ends here: Typer answers
    --help, --version and the completion options itself (status 0), and a bad command line with
    a message naming the option and the value (status 2)."""
    parsed: list = []
    try:
        typer.main.get_command(app).main(args=argv, prog_name=prog, obj=parsed)
    except SystemExit as end:
        # Typer ends every standalone run so, also one that parsed: only that one goes on.
        if end.code in (0, None) and parsed:
            return parsed[0]
        raise
    raise AssertionError("Typer's standalone run returned instead of exiting")
