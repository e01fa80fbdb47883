"""gemsharectl: set the scheduler's time quantum and anti-thrash mode, and show its status.

`gemsharectl --set-tq 30 --anti-thrash off` (options of the top-level command, alone or
together) and `gemsharectl status [--json]` are part of the public contract.
"""

from __future__ import annotations

import json
import os
import re
import sys
from importlib import metadata
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape

from gemshare_nvs.connection import DEFAULT_SOCKET, socket_path
from gemshare_nvs.settings import (DEFAULT_CONTROL_GROUP, MODE_LABELS, TQ, TQ_MAX, TQ_MIN,
                                   check_mode)

from . import client, render
from .errors import CtlError, ExitCode

DEFAULT_TIMEOUT_S = 5.0

EPILOG = f"""\
[bold]Examples[/bold]
  gemsharectl --set-tq 30 --anti-thrash off   (either option alone works too)
  gemsharectl status
  gemsharectl status --json

[bold]Environment[/bold]
  GEMSHARE_SOCKET  the scheduler socket when --socket is not given
  (default {DEFAULT_SOCKET})

[bold]Exit status[/bold]
  {ExitCode.OK:d}  done
  {ExitCode.UNREACHABLE:d}  no scheduler on the socket, or it hung up, failed or did not answer in time
  {ExitCode.INVALID:d}  bad command line, or a value refused here or by the scheduler (nothing changed)
  {ExitCode.PERMISSION:d}  permission denied: the socket cannot be opened, or this user may not
     change settings (root and members of the scheduler's control group, default
     '{DEFAULT_CONTROL_GROUP}', may; anyone may read the status)
"""

app = typer.Typer(
    name="gemsharectl",
    help="Control gemshare-scheduler, which shares NVIDIA GPUs between CUDA programs by handing "
         "each device's lock out for a time quantum (TQ).\n\n"
         "With --set-tq and/or --anti-thrash the new settings are sent to the scheduler, which "
         "applies them at once; given a command as well, the settings change first.",
    epilog=EPILOG,
    add_completion=False,
    rich_markup_mode="rich",
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


class Target:
    """Which scheduler to talk to, shared by the top-level command and its subcommands."""

    def __init__(self, socket: Path, timeout: float):
        self.socket = socket
        self.timeout = timeout


def _stdout() -> Console:
    # Piped output gets a wide console: grep and logs see whole rows, not wrapped cells.
    wide = not sys.stdout.isatty() and "COLUMNS" not in os.environ
    return Console(width=200 if wide else None)


def _fail(error: CtlError):
    # Escaped: paths and the scheduler's words may hold brackets that rich would read as markup.
    Console(stderr=True).print(f"[bold red]gemsharectl:[/bold red] {escape(error.message)}",
                               markup=True, highlight=False, soft_wrap=True)
    raise typer.Exit(int(error.exit_code))


def _parse_tq(text: Optional[str]) -> Optional[int]:
    if text is None:
        return None
    try:
        if not re.fullmatch(r"\s*[+-]?\d+\s*", text):
            raise TQ.refusal(text)
        return TQ.check(int(text))
    except ValueError as exc:
        raise typer.BadParameter(f"{exc} (for example --set-tq 30)") from None


def _parse_mode(text: Optional[str]) -> Optional[str]:
    if text is None:
        return None
    try:
        return check_mode(text.strip().lower()).label
    except ValueError as exc:
        raise typer.BadParameter(f"{exc} (for example --anti-thrash off)") from None


def _show_version(wanted: bool) -> None:
    if wanted:
        try:
            version = metadata.version("gemshare")
        except metadata.PackageNotFoundError:
            version = "unknown (not installed as a package)"
        typer.echo(f"gemsharectl {version}")
        raise typer.Exit()


@app.callback(invoke_without_command=True)
def top_level(
    ctx: typer.Context,
    set_tq: Optional[str] = typer.Option(
        None, "--set-tq", metavar="SECONDS", callback=_parse_tq,
        help=f"Set the time quantum: whole seconds from {TQ_MIN} to {TQ_MAX}. A holder keeps a "
             f"device's lock this long while others wait. Takes effect at once."),
    anti_thrash: Optional[str] = typer.Option(
        None, "--anti-thrash", metavar="|".join(MODE_LABELS), callback=_parse_mode,
        help="Set the anti-thrash mode: 'on' gives each device to one program at a time "
             "(first come, first served); 'off' lets every program submit freely; 'auto' lets "
             "programs whose memory fits on the device together run together, and the rest "
             "take turns as with 'on'."),
    socket: Optional[Path] = typer.Option(
        None, "--socket", metavar="PATH", envvar="GEMSHARE_SOCKET", show_envvar=True,
        help=f"Scheduler socket. Default: {DEFAULT_SOCKET}."),
    timeout: float = typer.Option(
        DEFAULT_TIMEOUT_S, "--timeout", metavar="SECONDS", min=0.1, max=3600.0,
        help="How long to wait for the scheduler's answer."),
    version: bool = typer.Option(
        False, "--version", callback=_show_version, is_eager=True,
        help="Print gemsharectl's version and exit."),
) -> None:
    ctx.obj = Target(socket_path(socket), timeout)
    if set_tq is None and anti_thrash is None:
        if ctx.invoked_subcommand is None:
            ctx.fail("nothing to do: give --set-tq and/or --anti-thrash, or a command such as "
                     "'status'.")
        return
    try:
        reply = client.change_settings(ctx.obj.socket, timeout, tq=set_tq,
                                       anti_thrash=anti_thrash)
    except CtlError as error:
        _fail(error)
    now = []
    if "tq" in reply:
        now.append(f"TQ {reply['tq']} s")
    if "anti_thrash" in reply:
        now.append(f"anti-thrash {reply['anti_thrash']}")
    typer.echo(f"gemshare-scheduler on {ctx.obj.socket}: {', '.join(now) or 'settings changed'}")


@app.command()
def status(
    ctx: typer.Context,
    as_json: bool = typer.Option(
        False, "--json", help="Print the scheduler's status object as one JSON object instead "
                              "of tables (tq, anti_thrash, grace_ms, devices, clients)."),
) -> None:
    """Show the time quantum, mode, each device's holders and waiters, and every client.

    In mode auto each device also shows what the scheduler decides with: the holders' memory, the context reserve per holder, and the capacity (from NVML or from what the clients' drivers report).

    Client columns: id, pid, uid, process name, device, state (holding / waiting / idle), time spent holding, number of waits and time spent waiting, bytes allocated, when it connected, and how many times its lock was revoked. Anyone may read the status.
    """
    target: Target = ctx.obj
    try:
        state = client.read_status(target.socket, target.timeout)
    except CtlError as error:
        _fail(error)
    if as_json:
        typer.echo(json.dumps(state, indent=2))
    else:
        console = _stdout()
        console.print(render.status_view(console, state, str(target.socket)))


def main() -> None:
    app(prog_name="gemsharectl")
