"""deploy/Dockerfile: what it copies exists, its commands are the project's, and its entrypoint
runs them (or prepares a node) as documented."""

from __future__ import annotations

import json
import os
import pwd
import re
import signal
import stat
import subprocess
import sys

import pytest
from deploy_files import DEPLOY, REPO
from installed_commands import COMMANDS

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

DOCKERFILE = DEPLOY / "Dockerfile"
ENTRYPOINT = DEPLOY / "entrypoint.sh"
SCRIPTS = COMMANDS


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments left out."""
    joined = re.sub(r"\\\n", " ", "\n".join(line for line in DOCKERFILE.read_text().splitlines()
                                            if not line.lstrip().startswith("#")))
    pairs = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            pairs.append((word.upper(), rest.strip()))
    return pairs


def final_stage() -> list[tuple[str, str]]:
    steps = instructions()
    last_from = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    return steps[last_from:]


def copies() -> list[tuple[list[str], str, bool]]:
    """(sources, destination, from another stage) of every COPY."""
    found = []
    for word, rest in instructions():
        if word == "COPY":
            parts = rest.split()
            flags = [p for p in parts if p.startswith("--")]
            paths = [p for p in parts if not p.startswith("--")]
            found.append((paths[:-1], paths[-1], any(f.startswith("--from=") for f in flags)))
    return found


def test_every_copy_source_from_the_context_exists():
    from_context = [source for sources, _, staged in copies() if not staged for source in sources]
    assert "libnvs/" in from_context and "pyproject.toml" in from_context
    assert [s for s in from_context if not (REPO / s).exists()] == []


def test_the_package_is_built_with_its_build_backend_copied_in():
    """pip builds the package with the backend pyproject.toml names from the sources' folder."""
    system = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]
    from_context = [source.strip("/") for sources, _, staged in copies() if not staged
                    for source in sources]
    assert system["backend-path"] and all(folder in from_context
                                          for folder in system["backend-path"])


def test_nothing_copied_from_the_context_is_ignored():
    ignored = [line.strip() for line in (DEPLOY / "Dockerfile.dockerignore").read_text()
               .splitlines() if line.strip() and not line.startswith("#")]
    for sources, _, staged in copies():
        for source in ([] if staged else sources):
            top = source.strip("/").split("/")[0]
            assert top not in ignored, f"{source} is copied but .dockerignore leaves it out"


def test_it_builds_libnvs_with_the_projects_own_rules_in_a_stage_of_its_own():
    stages = [rest for word, rest in instructions() if word == "FROM"]
    assert len(stages) >= 3 and any(s.endswith("AS libnvs") for s in stages)
    runs = " ".join(rest for word, rest in instructions() if word == "RUN")
    assert "make -f libnvs/build.mk -f ship.mk" in runs and " ship-lib " in runs
    assert (REPO / "libnvs" / "build.mk").is_file()
    library = [dest for sources, dest, staged in copies() if staged
               and any(s.endswith("libnvs.so") for s in sources)]
    assert library == ["nvs/libnvs.so", "/usr/local/lib/gemshare/libnvs.so"]


def test_the_package_in_the_image_links_to_its_library():
    """So that `gemsharectl library-path` in the image prints the library, as after make install."""
    runs = [rest for word, rest in final_stage() if word == "RUN"]
    assert any(run.startswith("ln -sf /usr/local/lib/gemshare/libnvs.so ")
               and "gemshare_nvs.__file__" in run and run.endswith('/libnvs.so"')
               for run in runs), runs


def test_entrypoint_and_default_command_are_the_projects():
    final = dict((word, rest) for word, rest in final_stage() if word in ("ENTRYPOINT", "CMD"))
    entrypoint, command = json.loads(final["ENTRYPOINT"]), json.loads(final["CMD"])
    assert entrypoint == ["/usr/local/bin/gemshare-entrypoint"]
    assert [dest for sources, dest, _ in copies() if sources == ["deploy/entrypoint.sh"]] \
        == entrypoint
    assert command == ["gemshare-scheduler"]
    # Each command the entrypoint runs is one the package installs.
    runs = re.findall(r"^\s*([\w|-]+)\)\n(?:\s*#.*\n)*\s*exec (?:\"\$HOLD_SIGNALS\" )?"
                      r"\"\$COMMANDS/\$command\"", ENTRYPOINT.read_text(), re.M)
    assert {name for names in runs for name in names.split("|")} == SCRIPTS
    assert {"gemshare-scheduler", "gemshare-device-plugin"} <= SCRIPTS


def test_the_image_starts_the_scheduler_through_hold_signals():
    runs = " ".join(rest for word, rest in instructions() if word == "RUN")
    assert "-f launcher/build.mk" in runs and " hold-signals " in runs
    assert [dest for sources, dest, staged in copies() if staged
            and sources == ["/out/hold-signals"]] == ["/usr/local/lib/gemshare/hold-signals"]
    assert re.search(r"^HOLD_SIGNALS=\$\{HOLD_SIGNALS:-/usr/local/lib/gemshare/hold-signals\}$",
                     ENTRYPOINT.read_text(), re.M)


def signals_held(status: str) -> set[int]:
    """The signal numbers /proc/PID/status's SigBlk line holds blocked."""
    mask = int(re.search(r"^SigBlk:\s*([0-9a-f]+)$", status, re.M)[1], 16)
    return {number for number in range(1, 65) if mask >> (number - 1) & 1}


@pytest.mark.parametrize("command, held", [
    ("gemshare-scheduler", {signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2}),
    ("gemshare-device-plugin", set()),
])
def test_the_scheduler_starts_with_reload_and_status_signals_held(tmp_path, hold_signals,
                                                                   command, held):
    """Only the scheduler: the others have no handlers for them to wait for."""
    commands = tmp_path / "bin"
    commands.mkdir()
    stand_in = commands / command
    # A Python script, as the command is: a shell may clear the mask when it starts.
    stand_in.write_text(f"#!{sys.executable}\nimport sys\nprint(' '.join(sys.argv[1:]))\n"
                        "print(open('/proc/self/status').read())\n")
    stand_in.chmod(0o755)
    result = entrypoint(command, "--socket", "/x", env={"COMMANDS": str(commands),
                                                        "HOLD_SIGNALS": hold_signals})
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "--socket /x"
    assert signals_held(result.stdout) & {signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2} == held


def test_the_image_runs_as_a_user_of_its_own():
    users = [rest for word, rest in final_stage() if word == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")


def entrypoint(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", str(ENTRYPOINT), *args], capture_output=True, text=True,
                          timeout=30, env={**os.environ, **(env or {})})


@pytest.mark.parametrize("args", [["gemshare-nothing"], ["prepare-host"], ["install-library"],
                                  ["prepare-scheduler", "/a", "/b"], ["sh", "-c", "true"]])
def test_entrypoint_refuses_what_it_does_not_know(args):
    result = entrypoint(*args)
    assert result.returncode == 2
    assert "gemshare:" in result.stderr


LIBRARY_FILE = "usr/local/lib/gemshare/libnvs.so"
SCHEDULER_DIRS = ("var/run/gemshare", "var/lib/gemshare")


@pytest.mark.parametrize("command, library, directories", [
    ("install-library", True, False),
    ("prepare-scheduler", False, True),
    ("prepare-host", True, True),
])
def test_node_commands_install_the_library_and_hand_over_the_directories(
        tmp_path, command, library, directories):
    source = tmp_path / "libnvs.so"
    source.write_bytes(b"\x7fELF stand-in")
    root = tmp_path / "host"
    me = pwd.getpwuid(os.getuid()).pw_name
    for _ in range(2):  # a restarted pod runs it again over what it left
        result = entrypoint(command, str(root), env={"LIBRARY": str(source), "SCHEDULER_USER": me})
        assert result.returncode == 0, result.stderr
    installed = root / LIBRARY_FILE
    assert installed.exists() == library
    if library:
        assert installed.read_bytes() == source.read_bytes()
        assert stat.S_IMODE(installed.stat().st_mode) == 0o755
        assert sorted(p.name for p in installed.parent.iterdir()) == ["libnvs.so"]
    for directory in SCHEDULER_DIRS:
        assert (root / directory).exists() == directories
        if directories:
            info = (root / directory).stat()
            assert stat.S_IMODE(info.st_mode) == 0o755 and info.st_uid == os.getuid()


def pins() -> dict[str, str]:
    found = {}
    for line in (DEPLOY / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            found[canonical(name)] = version.strip()
    return found


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_image_installs_the_kubernetes_extra_with_its_pins():
    runs = [rest for word, rest in instructions() if word == "RUN" and "pip install" in rest]
    assert any("-c deploy/constraints.txt" in run and '".[kubernetes,dra]"' in run
               for run in runs)
    assert ["deploy/constraints.txt"] in [sources for sources, _, staged in copies()]


def test_every_pin_is_within_pyprojects_ranges():
    from packaging.requirements import Requirement
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    given = pins()
    extras = project["optional-dependencies"]
    for text in (*project["dependencies"], *extras["kubernetes"], *extras["dra"]):
        requirement = Requirement(text)
        if requirement.name == project["name"]:
            continue
        if requirement.marker is not None and \
                not requirement.marker.evaluate({"python_version": "3.12"}):
            continue  # not installed on the image's Python
        version = given.get(canonical(requirement.name))
        assert version is not None, f"{requirement.name} is not pinned"
        assert requirement.specifier.contains(version), (requirement, version)


def test_everything_the_image_installs_is_pinned():
    """Every distribution gemshare[kubernetes] brings, at any depth, as this environment's
    metadata names them, for the image's Python."""
    from importlib import metadata

    from packaging.requirements import Requirement
    environment = {"python_version": "3.12", "python_full_version": "3.12.0",
                   "sys_platform": "linux", "platform_system": "Linux", "extra": ""}
    wanted = [Requirement("gemshare[kubernetes,dra]")]
    seen: set[str] = set()
    while wanted:
        requirement = wanted.pop()
        name = canonical(requirement.name)
        if name in seen:
            continue
        seen.add(name)
        for text in metadata.requires(requirement.name) or []:
            inner = Requirement(text)
            if inner.marker is None or any(
                    inner.marker.evaluate({**environment, "extra": extra})
                    for extra in ("", *requirement.extras)):
                wanted.append(inner)
    seen.discard("gemshare")
    assert "grpcio" in seen and "typer" in seen and "kubernetes" in seen
    assert sorted(seen - set(pins())) == []
