"""The README documents what the code really has: options, environment variables, CI's command."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer.main
from ctl_helpers import REPO

from gemshare_ctl.app import app
from gemshare_nvs.config import file as config_file
from gemshare_nvs.core.policy import Policy
from gemshare_nvs.observe.metrics import (
    FIXED_SERIES,
    PER_BUDGET_SERIES,
    PER_CLIENT_FAMILIES,
    PER_DEVICE_SERIES,
    registry_for,
)
from gemshare_nvs.observe.mps_metrics import MPS_SERIES
from gemshare_nvs.protocol import Mode
from gemshare_nvs.service.command_line import option_names

README = (REPO / "README.md").read_text()


def documented(word: str) -> bool:
    """Whether the README names `word` whole (so --tq is not found inside --tq-max)."""
    return re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", README) is not None


def test_every_gemsharectl_option_is_documented():
    command = typer.main.get_command(app)
    options = {name for param in command.params for name in param.opts if name.startswith("--")}
    options |= {name for sub in command.commands.values() for param in sub.params
                for name in param.opts if name.startswith("--")}
    assert "--set-tq" in options and "--json" in options
    missing = sorted(option for option in options if not documented(option))
    assert missing == [], f"README does not document gemsharectl {missing}"


def test_every_scheduler_option_is_documented():
    options = option_names()
    assert "--tq" in options
    missing = sorted(option for option in options if not documented(option))
    assert missing == [], f"README does not document gemshare-scheduler {missing}"


def test_every_environment_variable_read_anywhere_is_documented():
    sources = [*REPO.glob("libnvs/**/*.[ch]"), *REPO.glob("nvs/**/*.py"), *REPO.glob("ctl/*.py")]
    read = {name for path in sources
            for name in re.findall(r"\bGEMSHARE_[A-Z][A-Z_]*[A-Z]\b", path.read_text())}
    read = {name for name in read if not name.endswith("_H")}  # C include guards
    assert "GEMSHARE_SOCKET" in read
    missing = sorted(name for name in read if not documented(name))
    assert missing == [], f"README's environment table lacks {missing}"


def test_ci_runs_the_readme_test_command():
    ci_commands = [line.strip() for line in (REPO / ".ci/run").read_text().splitlines()
                   if line.strip() and not line.startswith(("#", "set ", "cd "))]
    quickstart = README.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    test_lines = [line.split("#")[0].strip() for line in quickstart.splitlines()
                  if "run the whole test suite" in line]
    assert test_lines and ci_commands == test_lines, (ci_commands, test_lines)


def toml_examples(path: Path) -> list[str]:
    return re.findall(r"^```toml\n(.*?)^```", path.read_text(), re.M | re.S)


@pytest.mark.parametrize("document", ["README.md", "docs/config.md"])
def test_every_config_example_is_accepted_on_any_host(document, tmp_path):
    """Read as the scheduler reads a file, with this host's accounts: an example that named a
    user most hosts lack would be refused on them."""
    examples = toml_examples(REPO / document)
    assert examples
    for number, text in enumerate(examples):
        path = tmp_path / f"example-{number}.toml"
        path.write_text(text)
        config_file.read(path)  # raises, listing every problem, if the scheduler would refuse
        rules = re.sub(r"#.*", "", text)
        assert not re.search(r"\b(user|group)\s*=", rules), "a name not every host has"


def test_the_comparisons_figures_are_the_benchmarks():
    """Every number docs/comparison.md gives in its figures is one docs/benchmarks.md reports."""
    comparison = (REPO / "docs/comparison.md").read_text()
    benchmarks = (REPO / "docs/benchmarks.md").read_text()
    figures = comparison.split("## In figures", 1)[1]
    numbers = set(re.findall(r"(?<![\w.])\d+\.\d+|\d+(?=%)", figures))
    assert len(numbers) >= 20
    missing = sorted(n for n in numbers
                     if not re.search(rf"(?<![\d.]){re.escape(n)}(?![\d])", benchmarks))
    assert missing == [], f"figures not in docs/benchmarks.md: {missing}"


def test_the_metrics_table_names_every_family_and_the_bound_its_counts():
    policy = Policy(tq=30, mode=Mode.ON, grace_s=10, max_clients=8)
    registry = registry_for(policy, lambda: 0.0,
                            lambda: {"enabled": True, "running": True, "restarts": 0})
    families = {family.name + ("_total" if family.type == "counter" else "")
                for family in registry.collect()}
    assert "gemshare_mps_up" in families
    table = README.split("| metric | type |", 1)[1].split("\n\n", 1)[0]
    documented_families = set(re.findall(r"^\| `(gemshare_\w+)`", table, re.M))
    assert documented_families == families
    bound = re.search(r"bounded: (\d+) of its own \((\d+) with `--mps`\), (\d+) per GPU, and at "
                      r"most (\d+) per GPU[^.]*, and (\d+)\s+per\s+GPU\s+for\s+each\s+container", README)
    assert bound and tuple(map(int, bound.groups())) == (
        FIXED_SERIES, FIXED_SERIES + MPS_SERIES, PER_DEVICE_SERIES, PER_CLIENT_FAMILIES,
        PER_BUDGET_SERIES)
