"""How gemsharectl runs its Typer app and reports a command line it cannot run: on a terminal,
Typer's box under the usage; anywhere else (a pipe, a file, a journal) one plain line, so that
`gemsharectl --set-tq 0 2>&1 | grep 86400` finds the whole sentence."""

from __future__ import annotations

import errno
import os
import sys

import typer
import typer.rich_utils
from gemshare_nvs.service.typer_command import ClickException, usage_line


def silence_stdout() -> None:
    """Point stdout at /dev/null, so that Python does not complain of a closed pipe when it
    flushes stdout at exit."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def run(app: typer.Typer, prog: str) -> None:
    """Run `app` on this process's command line and exit with its status: 0 done, 2 a bad
    command line (usage errors), or what the command exits with."""
    try:
        code = app(prog_name=prog, standalone_mode=False)
    except ClickException as error:
        if type(error).__name__ == "NoArgsIsHelpError":  # the help, shown instead of an error
            if error.format_message():  # rich markup prints it while the error is made
                typer.echo(error.format_message())
        elif sys.stderr.isatty():
            typer.rich_utils.rich_format_error(error)
        else:
            typer.echo(usage_line(prog, error), err=True)
        sys.exit(error.exit_code)
    except typer.Abort:
        typer.echo(f"{prog}: aborted", err=True)
        sys.exit(1)
    except OSError as error:
        if error.errno != errno.EPIPE:
            raise
        # Whatever read the output went away (`gemsharectl status | head -1`): it has what it
        # wanted. Click, run standalone, exits so too.
        silence_stdout()
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
