"""gemsharectl: change the scheduler's settings and one client's terms, check and reload its
config file, and show its status.

`gemsharectl --set-tq 30 --anti-thrash off` (options of the top-level command, alone or
together; `--tq` is `--set-tq`'s other name, the scheduler's) and `gemsharectl status [--json]` are part of the public contract.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.text import Text

from gemshare_nvs.config import file as config_file
from gemshare_nvs.config.parsing import ConfigError
from gemshare_nvs.config.settings import (
    DEFAULT_CONFIG,
    DEFAULT_CONTROL_GROUP,
    GPU_LIMIT,
    MEMORY_LIMIT,
    MIN_SLICE_MS,
    MODE_LABELS,
    TQ,
    TQ_MAX,
    TQ_MIN,
    WEIGHT,
    WholeNumber,
    modes_starting,
)
from gemshare_nvs.config.idle_terms import idle_terms
from gemshare_nvs.config.shadows import shadows
from gemshare_nvs.library import LibraryMissing, library_path
from gemshare_nvs.version import version
from gemshare_nvs.wire.connection import DEFAULT_SOCKET, socket_path

from . import client, doctor, options, render, top_loop, usage_errors
from .config_view import config_view, errors_view
from .errors import CtlError, ExitCode
from .shares_window import ShareWindow
from .top_view import top_view
from .usage_errors import silence_stdout

DEFAULT_TIMEOUT_S = 5.0
TIMEOUT_MIN_S, TIMEOUT_MAX_S = 0.1, 3600.0
DEFAULT_INTERVAL_S, INTERVAL_MIN_S, INTERVAL_MAX_S = 1.0, 0.1, 60.0
CHECK_FAILED = 1  # config check's status for a file with problems, as test(1) or grep would
LIBRARY_MISSING = 1  # library-path's status when there is none, as which(1) would
DOCTOR_FAILED = 1  # doctor's status when a check fails: `gemsharectl doctor || alert`
PID = WholeNumber("pid", 1, 1 << 22)  # Linux's largest pid_max
SOCKET_HELP = f"Scheduler socket. Default: $GEMSHARE_SOCKET, else {DEFAULT_SOCKET}."
TIMEOUT_HELP = (f"How long to wait for the scheduler's answer, {TIMEOUT_MIN_S:g} to "
                f"{TIMEOUT_MAX_S:g} seconds. Default: {DEFAULT_TIMEOUT_S:g}.")
TIMEOUT = options.seconds("timeout", TIMEOUT_MIN_S, TIMEOUT_MAX_S, "--timeout 10")

# Lines of at most 76 characters: the help is printed indented by one, and rich wraps a longer
# line mid-phrase at 80 columns.
EPILOG = f"""\
[bold]Examples[/bold]
  gemsharectl --tq 30 --anti-thrash off     (either option alone works too)
  gemsharectl --reset-settings              (the config file's settings again)
  gemsharectl status
  gemsharectl status --json
  gemsharectl top                           (q quits)
  gemsharectl client 4242 --weight 2 --memory-limit 8GiB
  gemsharectl config check {DEFAULT_CONFIG}
  gemsharectl config reload
  gemsharectl doctor --pid 4242             (why is it not shared?)
  LD_PRELOAD=$(gemsharectl library-path) python train.py

[bold]Environment[/bold]
  GEMSHARE_SOCKET  the scheduler socket when --socket is not given
  (default {DEFAULT_SOCKET})

[bold]Exit status[/bold]
  {ExitCode.OK:d}  done
  {ExitCode.UNREACHABLE:d}  no scheduler on the socket, or it hung up, failed or did not answer
     in time
  {ExitCode.INVALID:d}  bad command line, or a value refused here or by the scheduler
     (nothing changed)
  {ExitCode.PERMISSION:d}  permission denied: the socket cannot be opened, or this user may not
     change settings (root and members of the scheduler's control group,
     default '{DEFAULT_CONTROL_GROUP}', may; anyone may read the status)
  'config check' exits {ExitCode.OK:d} for a valid file, {CHECK_FAILED} for a missing one or one
  with problems; 'library-path' exits {LIBRARY_MISSING} when this installation has no
  library; 'doctor' exits {DOCTOR_FAILED} when any check fails, {ExitCode.OK:d} when none does
  (warnings included).
"""

app = typer.Typer(
    name="gemsharectl",
    help="Control gemshare-scheduler, which shares NVIDIA GPUs between CUDA programs by handing "
         "each device's lock out for a time quantum (TQ).\n\n"
         "With --tq, --anti-thrash, --min-slice-ms or --reset-settings (named as the "
         "scheduler's options; --set-tq and --set-min-slice-ms are the same) the settings are "
         "sent to the scheduler, which applies them at once; given a command as well, the "
         "settings change first. Settings changed here win over the config file's, which win "
         "over the scheduler's command line; the scheduler keeps them across restarts (in its "
         "--state-dir) until --reset-settings.",
    epilog=EPILOG,
    rich_markup_mode="rich",
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    no_args_is_help=True,
)


class Target:
    """Which scheduler to talk to, shared by the top-level command and its subcommands."""

    def __init__(self, socket: Path, timeout: float):
        self.socket = socket
        self.timeout = timeout


# The options every command that talks to the scheduler takes after its name as well
# (`gemsharectl status --socket PATH`); given there, they win over the same given before it.
# Plain text, not a Path: Typer would check a Path for reading, where a socket needs writing
# (client.py checks that, when connecting is refused).
SocketAfter = Annotated[Optional[str], typer.Option("--socket", metavar="PATH",
                                                    help=SOCKET_HELP)]
TimeoutAfter = Annotated[Optional[str], typer.Option("--timeout", metavar="SECONDS",
                                                     callback=TIMEOUT, help=TIMEOUT_HELP)]


def _target(ctx: typer.Context, socket: Optional[str], timeout: Optional[float]) -> Target:
    before: Target = ctx.obj
    return Target(before.socket if socket is None else socket_path(socket),
                  before.timeout if timeout is None else timeout)


def _stdout() -> Console:
    # Piped output gets a wide console: grep and logs see whole rows, not wrapped cells.
    wide = not sys.stdout.isatty() and "COLUMNS" not in os.environ
    return Console(width=200 if wide else None)


def _fail(error: CtlError):
    # Escaped: paths and the scheduler's words may hold brackets that rich would read as markup.
    Console(stderr=True).print(f"[bold red]gemsharectl:[/bold red] {escape(error.message)}",
                               markup=True, highlight=False, soft_wrap=True)
    raise typer.Exit(int(error.exit_code))


def _show_version(wanted: bool) -> None:
    if wanted:
        typer.echo(f"gemsharectl {version()}")
        raise typer.Exit()


@app.callback(invoke_without_command=True)
def top_level(
    ctx: typer.Context,
    set_tq: Optional[str] = typer.Option(
        None, "--tq", "--set-tq", metavar="SECONDS", callback=options.whole(TQ, "--tq 30"),
        help=f"Set the time quantum: whole seconds from {TQ_MIN} to {TQ_MAX}. A holder keeps a "
             f"device's lock this long while others wait. Takes effect at once."),
    anti_thrash: Optional[str] = typer.Option(
        None, "--anti-thrash", metavar="|".join(MODE_LABELS), callback=options.mode,
        autocompletion=modes_starting,
        help="Set the anti-thrash mode: 'on' gives each device to one program at a time "
             "(first come, first served); 'off' lets every program submit freely; 'auto' lets "
             "programs whose memory fits on the device together run together, and the rest "
             "take turns as with 'on'."),
    set_min_slice_ms: Optional[str] = typer.Option(
        None, "--min-slice-ms", metavar="MS",
        callback=options.whole(MIN_SLICE_MS, "--min-slice-ms 300"),
        help="Set the min slice: how long a holder keeps the lock before a client under its "
             "share of GPU time may take it, in milliseconds. Also --set-min-slice-ms."),
    # The old name, its own hidden option: both names in one cell of the help's table would be
    # cut short at 80 columns.
    old_min_slice_ms: Optional[str] = typer.Option(
        None, "--set-min-slice-ms", metavar="MS", hidden=True,
        callback=options.whole(MIN_SLICE_MS, "--set-min-slice-ms 300")),
    reset_settings: bool = typer.Option(
        False, "--reset-settings",
        help="Drop every setting changed with gemsharectl, here and in the scheduler's state "
             "file: the config file's values (else the command line's) apply again. With "
             "--tq and the like, those are set afterwards."),
    socket: Optional[str] = typer.Option(
        None, "--socket", metavar="PATH", envvar="GEMSHARE_SOCKET", show_envvar=False,
        # The default path is under Environment below: an unbreakable path here would narrow
        # the option names' column until they are cut, in an 80-column terminal.
        help="Scheduler socket. Default: $GEMSHARE_SOCKET, else the one under Environment "
             "below. Also taken after a command."),
    timeout: Optional[str] = typer.Option(
        None, "--timeout", metavar="SECONDS", callback=TIMEOUT,
        help=TIMEOUT_HELP + " Also taken after a command."),
    version: bool = typer.Option(
        False, "--version", callback=_show_version, is_eager=True,
        help="Print gemsharectl's version and exit."),
) -> None:
    ctx.obj = Target(socket_path(socket), DEFAULT_TIMEOUT_S if timeout is None else timeout)
    if old_min_slice_ms is not None:
        if set_min_slice_ms not in (None, old_min_slice_ms):
            ctx.fail("--min-slice-ms and --set-min-slice-ms are one option: give it once")
        set_min_slice_ms = old_min_slice_ms
    if set_tq is None and anti_thrash is None and set_min_slice_ms is None \
            and not reset_settings:
        if ctx.invoked_subcommand is None:
            ctx.fail("nothing to do: give a setting (--tq, --anti-thrash, --min-slice-ms, "
                     "--reset-settings) or a command such as 'status'")
        return
    try:
        reply = client.change_settings(ctx.obj.socket, ctx.obj.timeout, tq=set_tq,
                                       anti_thrash=anti_thrash, min_slice_ms=set_min_slice_ms,
                                       clear=reset_settings)
    except CtlError as error:
        _fail(error)
    now = []
    if "tq" in reply:
        now.append(f"TQ {reply['tq']} s")
    if "anti_thrash" in reply:
        now.append(f"anti-thrash {reply['anti_thrash']}")
    if "min_slice_ms" in reply:
        now.append(f"min slice {reply['min_slice_ms']} ms")
    typer.echo(f"gemshare-scheduler on {ctx.obj.socket}: {', '.join(now) or 'settings changed'}"
               + (" (changes made with gemsharectl dropped first)" if reset_settings else ""))
    if reply.get("temporary"):
        typer.echo(f"These changes last only until the scheduler stops: {reply['temporary']}.",
                   err=True)


@app.command()
def status(
    ctx: typer.Context,
    as_json: bool = typer.Option(
        False, "--json", help="Print the scheduler's status object as one JSON object instead "
                              "of tables (tq, anti_thrash, grace_ms, devices, clients)."),
    socket: SocketAfter = None,
    timeout: TimeoutAfter = None,
) -> None:
    """Show the time quantum, mode, each device's holders and waiters, and every client.

    In mode auto each device also shows what the scheduler decides with: the holders' memory, the context reserve per holder, and the capacity (from NVML or from what the clients' drivers report).

    Client columns: id, pid, uid, process name, device, state (holding / waiting / idle), time spent holding, number of waits and time spent waiting, bytes allocated, when it connected, and how many times its lock was revoked. Anyone may read the status.
    """
    target = _target(ctx, socket, timeout)
    try:
        state = client.read_status(target.socket, target.timeout)
    except CtlError as error:
        _fail(error)
    if as_json:
        typer.echo(json.dumps(state, indent=2))
    else:
        console = _stdout()
        console.print(render.status_view(console, state, str(target.socket)))


@app.command()
def top(
    ctx: typer.Context,
    once: bool = typer.Option(
        False, "--once", help="Print one frame to stdout and exit, for scripts: two polls "
                              "--interval apart, so the shares are measured."),
    interval: Optional[str] = typer.Option(
        None, "--interval", metavar="SECONDS",
        callback=options.seconds("interval", INTERVAL_MIN_S, INTERVAL_MAX_S, "--interval 2"),
        help=f"Seconds between polls of the scheduler, {INTERVAL_MIN_S:g} to "
             f"{INTERVAL_MAX_S:g}. Default: {DEFAULT_INTERVAL_S:g}."),
    socket: SocketAfter = None,
    timeout: TimeoutAfter = None,
) -> None:
    """A live view: each device's holder, queue and last drop; each client's share of GPU time over the last minute, memory, state and weight. q or Ctrl-C quits. Into a pipe or a file it writes a plain frame every interval instead, until Ctrl-C or the reader goes away."""
    target = _target(ctx, socket, timeout)
    interval = DEFAULT_INTERVAL_S if interval is None else interval
    live = not once and sys.stdout.isatty()

    def poll() -> dict:
        return client.read_status(target.socket, target.timeout)

    def frame(status: dict, window) -> object:
        return top_view(status, window.shares(), str(target.socket), span_s=window.span_s(),
                        live=live)

    window = ShareWindow()
    try:
        if once:
            status = top_loop.once(poll, time.sleep, time.monotonic, interval, window)
            _stdout().print(frame(status, window))
        elif live:
            _top_live(poll, frame, window, interval)
        else:
            _top_stream(poll, frame, window, interval)
    except CtlError as error:
        _fail(error)
    except (KeyboardInterrupt, ReaderGone):  # how a view is often left: not a failure
        pass


def _top_live(poll, frame, window, interval: float) -> None:
    # Both context managers undo what they did (alternate screen, cbreak) however the loop ends.
    keys = top_loop.stdin_keys()
    with Live(console=Console(), screen=True, auto_refresh=False) as live, \
            (keys or contextlib.nullcontext()):
        def show(status: dict, shares_window) -> None:
            live.update(frame(status, shares_window), refresh=True)

        top_loop.run(poll, show, keys or top_loop.NoKeys(), time.monotonic, interval, window)


class ReaderGone(Exception):
    """Whatever read `top`'s frames closed the pipe (`gemsharectl top | head`): it has what it
    wanted."""


def _reader_gone() -> None:
    silence_stdout()
    raise ReaderGone


def _top_stream(poll, frame, window, interval: float) -> None:
    """Frames one after the other, each as `--once` prints it and a blank line after, flushed as
    it is written: for `gemsharectl top | tee log` or a file. Keys are not read (the terminal,
    if any, belongs to whatever reads the pipe)."""
    console = _stdout()
    console.on_broken_pipe = _reader_gone  # rich's own would exit with status 1

    def show(status: dict, shares_window) -> None:
        console.print(frame(status, shares_window))
        console.print()
        try:
            console.file.flush()
        except BrokenPipeError:
            _reader_gone()

    top_loop.run(poll, show, top_loop.NoKeys(), time.monotonic, interval, window)


@app.command("client")
def client_terms(
    ctx: typer.Context,
    pid: str = typer.Argument(..., metavar="PID", callback=options.whole(PID, "client 4242"),
                              help="Process id of a program running under libnvs.so."),
    weight: Optional[str] = typer.Option(
        None, "--weight", metavar="W", callback=options.positive(WEIGHT, "--weight 2"),
        help="Its share of GPU time beside others (1 by default; 2 gets twice the time of a "
             "client with weight 1 when both want the GPU)."),
    gpu_limit: Optional[str] = typer.Option(
        None, "--gpu-limit", metavar="FRACTION|none",
        callback=options.positive(GPU_LIMIT, "--gpu-limit 0.5", liftable=True),
        autocompletion=options.no_limit_completion,
        help="Most of the GPU's time it may hold, above 0 and at most 1, even when nobody "
             "waits; 'none' lifts a limit from the config file."),
    memory_limit: Optional[str] = typer.Option(
        None, "--memory-limit", metavar="SIZE|none",
        callback=options.size(MEMORY_LIMIT, "--memory-limit 8GiB"),
        autocompletion=options.no_limit_completion,
        help="Most memory it may allocate on each GPU, e.g. 8GiB or 512MiB; 'none' lifts a "
             "limit from the config file."),
    reset: bool = typer.Option(
        False, "--reset", help="Drop what gemsharectl gave this client before (the config "
                               "file's terms apply again); options given too apply after."),
    socket: SocketAfter = None,
    timeout: TimeoutAfter = None,
) -> None:
    """Give one program a weight and limits of its own, over the config file's rules, for as long as it stays connected (root and the control group only). Without options, show its terms and where each comes from."""
    target = _target(ctx, socket, timeout)
    values = {key: None if value == options.NO_LIMIT else value
              for key, value in (("weight", weight), ("gpu_limit", gpu_limit),
                                 ("memory_limit", memory_limit)) if value is not None}
    try:
        if values or reset:
            client.change_client(target.socket, target.timeout, pid, values, reset)
        state = client.read_status(target.socket, target.timeout)
    except CtlError as error:
        _fail(error)
    mine = [entry for entry in state.get("clients") or [] if entry.get("pid") == pid]
    if not mine:
        _fail(CtlError(f"no client of the scheduler on {target.socket} has pid {pid} "
                       "('gemsharectl status' lists them)", ExitCode.INVALID))
    console = _stdout()
    for entry in mine:
        console.print(render.terms_view(entry))


config_app = typer.Typer(help="Check the scheduler's config file, or have it read again.",
                         no_args_is_help=True)
app.add_typer(config_app, name="config")


@config_app.command("check")
def config_check(
    path: Path = typer.Argument(Path(DEFAULT_CONFIG), metavar="[FILE]",
                                help=f"The file to check (default {DEFAULT_CONFIG})."),
) -> None:
    """Check a config file here, without a scheduler: print the settings and rules it gives, or every problem with its line (exit status 1). Rules that can never match, because an earlier rule takes all their clients, and terms that do nothing with the file's own settings (sm_share beside mps = false, say) are warned about on stderr; the file is still valid."""
    errors = Console(stderr=True, highlight=False, soft_wrap=True)  # whole lines, for grep
    try:
        config = config_file.read(path)
    except FileNotFoundError:
        errors.print(Text(f"{path}: no such file", style="bold red"))
        raise typer.Exit(CHECK_FAILED)
    except ConfigError as error:
        errors.print(errors_view(error))
        raise typer.Exit(CHECK_FAILED)
    _stdout().print(config_view(config))
    # Valid, and run as written, but most likely a mistake.
    warnings = [shadow.warning(config.path) for shadow in shadows(config)]
    warnings += idle_terms(config, config.settings,
                           {name: config.source(name) for name in config.settings})
    for warning in warnings:
        errors.print(Text(f"warning: {warning}", style="yellow"))


@config_app.command("reload")
def config_reload(ctx: typer.Context, socket: SocketAfter = None,
                  timeout: TimeoutAfter = None) -> None:
    """Have the scheduler read its config file again now, as SIGHUP does (it also reloads by itself when the file changes). A file with problems is refused as a whole and the configuration in force stays."""
    target = _target(ctx, socket, timeout)
    try:
        reply = client.reload_config(target.socket, target.timeout)
    except CtlError as error:
        _fail(error)
    loaded = reply.get("config") or {}
    rules = loaded.get("rules", 0)
    typer.echo(f"gemshare-scheduler on {target.socket}: reloaded {loaded.get('path')}, "
               f"{rules} rule{'' if rules == 1 else 's'}")


@app.command("library-path")
def library_path_command() -> None:
    """Print the absolute path of libnvs.so, the library to preload into each CUDA program: LD_PRELOAD=$(gemsharectl library-path) python train.py. It is the one this installation carries (a wheel's, make install's, the image's) or, run from a source tree, the one make built there."""
    try:
        typer.echo(library_path())
    except LibraryMissing as missing:
        _fail(CtlError(str(missing), LIBRARY_MISSING))


@app.command("doctor")
def doctor_command(
    ctx: typer.Context,
    pid: Optional[str] = typer.Option(
        None, "--pid", metavar="PID", callback=options.whole(PID, "doctor --pid 4242"),
        help="Also check this program: whether it has libnvs.so loaded (/proc/PID/maps) and is "
             "registered with the scheduler."),
    library: Optional[Path] = typer.Option(
        None, "--library", metavar="PATH", dir_okay=False,
        help="Check this libnvs.so instead of the one 'gemsharectl library-path' finds."),
    as_json: bool = typer.Option(
        False, "--json", help='Print {"ok": ..., "checks": [{"name", "status", "what", "fix"}]} '
                              "as one JSON object instead of lines."),
    socket: SocketAfter = None,
    timeout: TimeoutAfter = None,
) -> None:
    """Say what would stop programs of this user on this machine from being shared, and how to fix it: the scheduler (and its version), the library (found, and loadable here: architecture, glibc), the NVIDIA driver (managed memory), the GPUs, MPS where the scheduler runs it, /etc/ld.so.preload and LD_PRELOAD, and whether this user may change settings.

    One line per check: ok, warn or fail, what was found, and for the others the fix. Exit status 1 when any check fails, 0 otherwise (warnings do not count)."""
    target = _target(ctx, socket, timeout)
    checks = doctor.run_checks(target.socket, target.timeout, pid, library)
    if as_json:
        typer.echo(doctor.as_json(checks))
    else:
        for check in checks:
            typer.echo(check.line())
    if doctor.failed(checks):
        raise typer.Exit(DOCTOR_FAILED)


def main() -> None:
    usage_errors.run(app, "gemsharectl")
