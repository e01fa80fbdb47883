"""`make install DESTDIR=... PREFIX=/usr` stages a complete, runnable installation."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

import pytest
from ctl_helpers import REPO, make_variables, skip_if_pypi_unreachable
from installed_commands import COMMANDS

from gemshare_nvs.service.readiness import wait_until_listening
from gemshare_plugin.cli import DEFAULT_LIBRARY

PREFIX = "/usr"
PKGDIR = f"{PREFIX}/lib/gemshare/python"
HOLD_SIGNALS = f"{PREFIX}/lib/gemshare/hold-signals"  # the scheduler's interpreter line's first
INSTALL_TIMEOUT = 300


@pytest.fixture(scope="module")
def staged(tmp_path_factory) -> Path:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    destdir = tmp_path_factory.mktemp("destdir")
    result = subprocess.run(
        ["make", "-C", str(REPO), "install", f"DESTDIR={destdir}", f"PREFIX={PREFIX}",
         *make_variables()], capture_output=True, text=True, timeout=INSTALL_TIMEOUT,
        stdin=subprocess.DEVNULL)
    skip_if_pypi_unreachable(result, "make install")
    assert result.returncode == 0, result.stdout + result.stderr
    return destdir


def staged_launcher(destdir: Path, name: str, scratch: Path) -> list[str]:
    """A command that runs the staged launcher, pointed at the staged package folder (and, for
    the scheduler's, at the staged hold-signals)."""
    text = (destdir / PREFIX.lstrip("/") / "bin" / name).read_text()
    interpreter = text.splitlines()[0][2:].split()  # e.g. /usr/bin/env -S python3 -IS
    if interpreter[0] == HOLD_SIGNALS:
        interpreter = [f"{destdir}{HOLD_SIGNALS}", " ".join(interpreter[1:])]  # as the kernel
    copy = scratch / name
    copy.write_text(text.replace(f'"{PKGDIR}"', f'"{destdir}{PKGDIR}"'))
    return [*interpreter, str(copy)]


def test_expected_files_are_in_place(staged):
    usr = staged / "usr"
    # Where the device plugin and the image have it; the package links to it.
    assert (usr / "lib/gemshare/libnvs.so").read_bytes()[:4] == b"\x7fELF"
    # Stripped, its debug file where gdb looks by build ID (/usr/lib/debug for PREFIX=/usr).
    build = Path(make_variables()[0].split("=", 1)[1])
    shipped = build / "ship" / "libnvs.so"
    assert (usr / "lib/gemshare/libnvs.so").read_bytes() == shipped.read_bytes()
    build_id = (build / "ship" / "libnvs.so.build-id").read_text().strip()
    debug = usr / "lib/debug/.build-id" / build_id[:2] / f"{build_id[2:]}.debug"
    assert debug.read_bytes() == (build / "ship" / "libnvs.so.debug").read_bytes()
    # The device plugin's gRPC comes with it: the kubernetes extra.
    assert (usr / "lib/gemshare/python/grpc").is_dir()
    assert os.readlink(usr / "lib/gemshare/python/gemshare_nvs/libnvs.so") == "../../libnvs.so"
    for name in ("gemshare-scheduler", "gemsharectl"):
        launcher = usr / "bin" / name
        assert os.access(launcher, os.X_OK), launcher
        first, *body = launcher.read_text().splitlines()
        interpreter = first[2:].split()[0]
        staged_interpreter = f"{staged}{interpreter}" if interpreter == HOLD_SIGNALS \
            else interpreter
        assert first.startswith("#!/") and Path(staged_interpreter).exists(), first
        assert f'sys.path.insert(0, "{PKGDIR}")' in body  # the final path, not the staging one
    python = usr / "lib/gemshare/python"
    for module in ("gemshare_nvs/daemon.py", "gemshare_ctl/app.py", "trio", "typer", "rich",
                   "pynvml.py"):
        assert (python / module).exists(), module
    assert not (python / "bin").exists()  # pip's own scripts would point at the build venv
    # Top-level modules are what the packages are imported as, and nothing else (no samples).
    modules = {path.name for path in python.glob("*.py")}
    assert modules <= {"pynvml.py", "typing_extensions.py"}, modules
    units = usr / "lib/systemd/system"
    assert "ExecStart=/usr/bin/gemshare-scheduler\n" in (
        units / "gemshare-scheduler.service").read_text()
    assert (units / "gemshare-scheduler.socket").exists()
    assert (usr / "share/doc/gemshare/README.md").exists()


MARKDOWN_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def local_links(page: Path) -> list[str]:
    """The targets of a Markdown page's links that are files beside it (no URL, no anchor)."""
    targets = [target.split("#", 1)[0] for target in MARKDOWN_LINK.findall(page.read_text())]
    return [target for target in targets if target and ":" not in target]


def test_installed_pages_link_only_to_installed_files(staged):
    docs = staged / "usr/share/doc/gemshare"
    pages = sorted(docs.rglob("*.md"))
    assert {"README.md", "CHANGELOG.md", "docs/config.md", "docs/protocol.md"} <= \
        {str(page.relative_to(docs)) for page in pages}
    assert (docs / "LICENSE").read_text().lstrip().startswith("Apache License")
    linked = 0
    for page in pages:
        for target in local_links(page):
            linked += 1
            assert (page.parent / target).is_file(), \
                f"{page.relative_to(docs)} links {target}, which is not installed"
    assert linked >= 10  # the README alone links a dozen pages


@pytest.mark.parametrize("name, options", [("metrics.conf.example", "--metrics 127.0.0.1:9410"),
                                           ("mps.conf.example", "--anti-thrash auto --mps")])
def test_the_drop_ins_are_installed_pointing_at_the_installed_scheduler(staged, name, options):
    drop_in = (staged / "usr/share/doc/gemshare" / name).read_text()
    assert f"\nExecStart=/usr/bin/gemshare-scheduler {options}\n" in drop_in


def test_nothing_installed_names_the_staging_directory(staged):
    leaks = [path for path in staged.rglob("*")
             if path.is_file() and str(staged).encode() in path.read_bytes()]
    assert leaks == []


def test_staged_commands_run_on_their_own_folder(staged, tmp_path):
    scheduler_cmd = staged_launcher(staged, "gemshare-scheduler", tmp_path)
    ctl_cmd = staged_launcher(staged, "gemsharectl", tmp_path)
    version = subprocess.run([*ctl_cmd, "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("gemsharectl "), version

    directory = Path(tempfile.mkdtemp(prefix="gs-install-", dir="/tmp"))  # short socket path
    socket = directory / "scheduler.sock"
    env = {k: v for k, v in os.environ.items() if k not in ("GEMSHARE_SOCKET", "NOTIFY_SOCKET",
                                                            "LISTEN_FDS", "LISTEN_PID")}
    log_path = directory / "scheduler.log"
    log = log_path.open("wb")
    # Its own state directory: as root the default is the machine's /var/lib/gemshare, whose
    # settings.json would then carry this test's TQ into every later scheduler there.
    scheduler = subprocess.Popen([*scheduler_cmd, "--socket", str(socket),
                                  "--state-dir", str(directory / "state")], env=env,
                                 stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until_listening(log_path, socket, scheduler, timeout=60)
        change = subprocess.run([*ctl_cmd, "--socket", str(socket), "--set-tq", "9"],
                                capture_output=True, text=True, timeout=60, env=env)
        assert change.returncode == 0, change.stderr
        status = subprocess.run([*ctl_cmd, "--socket", str(socket), "status", "--json"],
                                capture_output=True, text=True, timeout=60, env=env)
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["tq"] == 9
    finally:
        scheduler.send_signal(signal.SIGTERM)
        try:
            scheduler.wait(10)
        except subprocess.TimeoutExpired:
            scheduler.kill()
            scheduler.wait()
        log.close()
        shutil.rmtree(directory, ignore_errors=True)


def test_staged_library_path_is_the_installed_library(staged, tmp_path):
    shown = subprocess.run([*staged_launcher(staged, "gemsharectl", tmp_path), "library-path"],
                           capture_output=True, text=True, timeout=60)
    assert (shown.returncode, shown.stdout) == (0, f"{staged}/usr/lib/gemshare/libnvs.so\n"), \
        shown.stderr


def test_the_plugins_default_library_is_where_make_install_puts_it():
    assert DEFAULT_LIBRARY == "/usr/local/lib/gemshare/libnvs.so"
    dry_run = subprocess.run(["make", "-C", str(REPO), "-n", "install", *make_variables()],
                             capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert dry_run.returncode == 0, dry_run.stderr
    assert f" {DEFAULT_LIBRARY}\n" in dry_run.stdout  # PREFIX=/usr/local by default



def test_the_man_pages_are_installed_where_man_looks(staged):
    """Under $(MANDIR)/man1, /usr/share/man/man1 for PREFIX=/usr: `man gemsharectl` finds it."""
    man1 = staged / "usr/share/man/man1"
    assert sorted(path.name for path in man1.iterdir()) == sorted(f"{name}.1" for name in COMMANDS)
    for name in COMMANDS:
        page = (man1 / f"{name}.1").read_text()
        assert page.startswith(f'.TH "{name.upper().replace("-", chr(92) + "-")}" 1 '), page[:80]
        assert "\\fB\\-\\-version\\fR" in page  # every command's option, from its own help


def test_make_uninstall_removes_the_man_pages_and_no_other(tmp_path):
    """With MANDIR as given to make install; the pages of other packages stay."""
    man1 = tmp_path / "opt/man/man1"
    man1.mkdir(parents=True)
    for name in (*COMMANDS, "other"):
        (man1 / f"{name}.1").write_text(".TH X 1\n")
    removed = subprocess.run(["make", "-C", str(REPO), "uninstall", f"DESTDIR={tmp_path}",
                              "PREFIX=/usr", "MANDIR=/opt/man", *make_variables()],
                             capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert removed.returncode == 0, removed.stdout + removed.stderr
    assert [path.name for path in man1.iterdir()] == ["other.1"]


def test_launchers_find_python3_on_the_path_by_default(staged):
    first = (staged / "usr/bin/gemsharectl").read_text().splitlines()[0]
    assert first == "#!/usr/bin/env -S python3 -IS", first
    # hold-signals splits its one argument itself, as env -S would.
    first = (staged / "usr/bin/gemshare-scheduler").read_text().splitlines()[0]
    assert first == f"#!{HOLD_SIGNALS} /usr/bin/env python3 -IS", first


def test_the_installed_scheduler_starts_with_the_signals_held(staged, tmp_path):
    """Its interpreter line runs hold-signals first: a static program that blocks SIGHUP,
    SIGUSR1 and SIGUSR2 before Python starts (launcher/hold_signals.c)."""
    hold = staged / HOLD_SIGNALS.lstrip("/")
    assert hold.read_bytes()[:4] == b"\x7fELF" and os.access(hold, os.X_OK)
    shown = subprocess.run([str(hold), f"{sys.executable} -c",
                            "import signal; print(sorted(signal.pthread_sigmask("
                            "signal.SIG_BLOCK, [])))"],
                           capture_output=True, text=True, timeout=60)
    assert shown.stdout.split() == ["[<Signals.SIGHUP:", "1>,", "<Signals.SIGUSR1:", "10>,",
                                    "<Signals.SIGUSR2:", "12>]"], shown


def test_staged_commands_print_the_same_version(staged, tmp_path):
    printed = [subprocess.run([*staged_launcher(staged, name, tmp_path), "--version"],
                              capture_output=True, text=True, timeout=60).stdout.split()
               for name in ("gemshare-scheduler", "gemsharectl")]
    assert [words[0] for words in printed] == ["gemshare-scheduler", "gemsharectl"]
    assert printed[0][1:] == printed[1][1:] == [metadata.version("gemshare")]


def test_launcher_refuses_a_python_of_another_version(staged, tmp_path):
    text = (staged / "usr/bin/gemsharectl").read_text()
    built = re.search(r"sys.version_info\[:2\] != \((\d+), (\d+)\)", text)
    assert built is not None, text
    other = text.replace(built[0], "sys.version_info[:2] != (2, 7)")
    copy = tmp_path / "gemsharectl"
    copy.write_text(other)
    result = subprocess.run([sys.executable, "-IS", str(copy), "--version"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    here = "%d.%d" % sys.version_info[:2]
    # 2.7 stands in for the version built for; the advice names the Python that runs it.
    assert f"gemsharectl: installed for Python {built[1]}.{built[2]}" in result.stderr
    assert f"make install INSTALL_PYTHON={sys.executable} PYTHON={sys.executable} " \
           f"VENV=.venv-{here}" in " ".join(result.stderr.split())


def test_install_python_pins_an_interpreter(tmp_path):
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    result = subprocess.run(
        ["make", "-C", str(REPO), "-n", "install", f"DESTDIR={tmp_path}", f"PREFIX={PREFIX}",
         f"INSTALL_PYTHON={sys.executable}", *make_variables()],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    assert f"'#!{sys.executable} -IS'" in result.stdout


def fake_python(directory: Path, version: str) -> Path:
    """An interpreter that says it is Python `version` to make's version check."""
    script = directory / f"python{version}"
    script.write_text(f"#!/bin/sh\necho {version}\n")
    script.chmod(0o755)
    return script


def test_a_pinned_python_of_another_version_is_refused_at_install(tmp_path):
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    other = fake_python(tmp_path, "3.99")
    destdir = tmp_path / "stage"
    result = subprocess.run(
        ["make", "-C", str(REPO), "install", f"DESTDIR={destdir}", f"PREFIX={PREFIX}",
         f"INSTALL_PYTHON={other}", *make_variables()],
        capture_output=True, text=True, timeout=INSTALL_TIMEOUT, stdin=subprocess.DEVNULL)
    assert result.returncode != 0
    said = " ".join(result.stderr.split())
    assert f"INSTALL_PYTHON={other} is Python 3.99, but the package folder is filled from" in said
    # The advice builds the package folder with that very Python, so following it succeeds.
    assert f"make install INSTALL_PYTHON={other} PYTHON={other} VENV=.venv-3.99" in said
    assert not (destdir / PREFIX.lstrip("/") / "bin").exists()  # refused before installing


def test_the_advice_makes_the_virtualenv_with_the_pinned_python(tmp_path):
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    other = fake_python(tmp_path, "3.99")
    venv = tmp_path / "venv-3.99"
    for pinned_only in (True, False):  # PYTHON follows a pinned INSTALL_PYTHON by default
        extra = [] if pinned_only else [f"PYTHON={other}"]
        result = subprocess.run(
            ["make", "-C", str(REPO), "-n", "install", f"DESTDIR={tmp_path / 'stage'}",
             f"INSTALL_PYTHON={other}", f"VENV={venv}", *extra,
             f"BUILD={make_variables()[0].split('=', 1)[1]}"],
            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert result.returncode == 0, result.stderr
        assert f"{other} -m venv {venv}" in result.stdout
