"""What the long-running commands' command lines share (the scheduler's, the device plugin's):
one Typer command with plain help and errors, and its result handed back to the caller; and the
one plain line that they and gemsharectl give for a bad command line off a terminal.

Plain, not rich's boxes: their output usually ends in a journal or a pod's log, where a box
wraps a message across lines that grep then misses, as click's three lines split the error from
its command. The command appends what it parsed to ctx.obj, a list: a Typer run drops what the
command returns.
"""

from __future__ import annotations

import sys
from typing import Optional, Sequence

import typer
import typer.main

from ..config.settings import check_pipe_directory
from ..observe.tcp_address import parse_address
from ..version import version


# Typer re-exports only some of click's exceptions (from its own copy of click in recent
# releases); the base they share is the one its BadParameter derives from.
ClickException = next(cls for cls in typer.BadParameter.__mro__
                      if cls.__name__ == "ClickException")


def usage_line(prog: str, error: Exception, help_option: str = "-h") -> str:
    """`prog: what is wrong; see 'COMMAND -h'`, the message's own line breaks joined and its
    last full stop dropped; after a question ("Did you mean 'status'?") the pointer is a
    sentence of its own."""
    message = " ".join(error.format_message().split())
    context = getattr(error, "ctx", None)  # none where click's parser itself refuses
    see = f"'{context.command_path if context is not None else prog} {help_option}'"
    message = message.removesuffix(".")
    if message.endswith(("?", "!")):
        return f"{prog}: {message} See {see}."
    return f"{prog}: {message}; see {see}"


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
    a message naming the option and the value (status 2): click's usage on a terminal, one
    plain line anywhere else."""
    parsed: list = []
    try:
        status = typer.main.get_command(app).main(args=argv, prog_name=prog, obj=parsed,
                                                  standalone_mode=False)
    except ClickException as error:
        if sys.stderr.isatty():
            error.show()
        else:
            typer.echo(usage_line(prog, error, "--help"), err=True)
        sys.exit(error.exit_code)
    except typer.Abort:
        typer.echo(f"{prog}: aborted", err=True)
        sys.exit(1)
    if parsed:
        return parsed[0]
    sys.exit(status if isinstance(status, int) else 0)  # --help, --version: answered
