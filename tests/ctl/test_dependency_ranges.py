"""pyproject.toml's dependencies: each a tested range with an upper bound, the lowest of each
pinned in tests/lowest-versions.txt (make test-lowest), gRPC only in the kubernetes extra, the
Kubernetes client only in the dra extra."""

from __future__ import annotations

import re
import sys

from ctl_helpers import REPO
from packaging.requirements import Requirement
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
EXTRAS = PROJECT["optional-dependencies"]


def requirements(*groups: list[str]) -> list[Requirement]:
    return [Requirement(text) for group in groups for text in group]


def lower_bound(requirement: Requirement) -> Version:
    (low,) = [Version(s.version) for s in requirement.specifier if s.operator == ">="]
    return low


def test_every_dependency_has_a_lower_and_an_upper_bound():
    for requirement in requirements(PROJECT["dependencies"], *EXTRAS.values()):
        if requirement.name == PROJECT["name"]:
            continue  # the project's own extra, in the test extra
        operators = {s.operator for s in requirement.specifier}
        assert ">=" in operators and "<" in operators, str(requirement)


def test_the_lowest_versions_are_the_lower_bounds():
    pinned = {}
    for line in (REPO / "tests" / "lowest-versions.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            pinned[name.strip()] = Version(version)
    runtime = [r for r in requirements(PROJECT["dependencies"], EXTRAS["kubernetes"],
                                       EXTRAS["dra"])
               if (r.marker is None or r.marker.evaluate()) and r.name != PROJECT["name"]]
    assert pinned == {r.name: lower_bound(r) for r in runtime}


def test_grpc_is_the_kubernetes_extras_and_the_tests_get_it():
    names = {r.name for r in requirements(PROJECT["dependencies"])}
    assert not names & {"grpcio", "protobuf"}
    assert {r.name for r in requirements(EXTRAS["kubernetes"])} == {"grpcio", "protobuf"}
    own = [r for r in requirements(EXTRAS["test"]) if r.name == PROJECT["name"]]
    assert {extra for r in own for extra in r.extras} == {"kubernetes", "dra"}
    assert {r.name for r in requirements(EXTRAS["dra"])} == {PROJECT["name"], "kubernetes"}


def test_typer_stops_before_the_release_that_shows_flags_as_values():
    (typer,) = [r for r in requirements(PROJECT["dependencies"]) if r.name == "typer"]
    assert not typer.specifier.contains("0.29.0") and typer.specifier.contains("0.28.0")


def test_the_readme_installs_the_plugin_with_the_extra():
    readme = (REPO / "README.md").read_text()
    kubernetes = readme.split("\n## Kubernetes", 1)[1]
    assert "pip install 'gemshare[kubernetes]'" in kubernetes
    assert re.search(r"pip install 'dist/gemshare-[^']*\.whl\[kubernetes\]'", kubernetes)
