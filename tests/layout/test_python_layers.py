"""The scheduler package's parts import one way, as docs/architecture.md draws them.

Each module of nvs/ belongs to a part (its folder); a part may import only the parts listed for it
below, so the policy core never reaches for the service, the config or the sockets. Read from the
source with `ast`, every import counts, those inside functions too.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NVS = REPO / "nvs"
PACKAGE = "gemshare_nvs"

# part -> the parts it may import (besides itself). Parts are folders, or the top-level modules.
MAY_IMPORT = {
    "protocol": set(),
    "version": set(),
    "library": set(),
    "core.model": {"protocol"},
    "core.rules": {"core.model", "protocol"},
    "core": {"core.rules", "core.model", "protocol"},
    "config": {"core", "core.rules", "core.model", "protocol"},
    "wire": {"protocol"},
    "kubernetes": {"core.model", "protocol"},
    "observe": {"core", "core.rules", "core.model", "protocol", "version"},
    "service": {"config", "wire", "observe", "kubernetes", "core", "core.rules", "core.model",
                "protocol", "version"},
    "daemon": {"service", "config", "wire", "observe", "kubernetes", "core", "core.rules",
               "core.model", "protocol", "version"},
    "identity_daemon": {"service", "config", "observe", "kubernetes", "version"},
}
MAX_SOURCES_PER_FOLDER = 16


def module_name(path: Path) -> str:
    parts = path.relative_to(NVS).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join((PACKAGE, *parts))


def part_of(module: str) -> str:
    """The part a module of the package belongs to: its longest listed prefix."""
    inner = module.removeprefix(PACKAGE + ".")
    pieces = inner.split(".")
    for length in range(len(pieces), 0, -1):
        candidate = ".".join(pieces[:length])
        if candidate in MAY_IMPORT:
            return candidate
    raise AssertionError(f"{module} belongs to no part listed in MAY_IMPORT")


def imported_modules(path: Path) -> set[str]:
    """Every module of the package that `path` imports, resolved to absolute names."""
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith(PACKAGE)}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith(PACKAGE):
                continue
            # `from package import module` names a module; `from module import name` does not.
            for alias in node.names:
                submodule = NVS.joinpath(*f"{target}.{alias.name}".split(".")[1:])
                if submodule.with_suffix(".py").exists() or submodule.is_dir():
                    found.add(f"{target}.{alias.name}")
                else:
                    found.add(target)
    return found


def sources() -> list[Path]:
    """Every module but the package's own (empty) __init__."""
    return sorted(path for path in NVS.rglob("*.py") if path != NVS / "__init__.py")


def test_every_part_imports_only_the_parts_below_it():
    wrong = []
    for path in sources():
        mine = part_of(module_name(path))
        for target in imported_modules(path):
            if target == PACKAGE:
                continue
            theirs = part_of(target)
            if theirs != mine and theirs not in MAY_IMPORT[mine]:
                wrong.append(f"{path.relative_to(REPO)} ({mine}) imports {target} ({theirs})")
    assert wrong == []


def test_no_two_modules_import_each_other_even_through_others():
    graph = {module_name(path): imported_modules(path) - {PACKAGE} for path in sources()}
    state: dict[str, str] = {}
    circles = []

    def visit(module: str, trail: list[str]) -> None:
        state[module] = "open"
        for target in sorted(graph.get(module, ())):
            if state.get(target) == "open":
                circles.append(trail[trail.index(target):] + [target] if target in trail
                               else [module, target])
            elif target not in state:
                visit(target, trail + [target])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert circles == []


def test_the_rule_table_sees_a_core_module_reaching_up(tmp_path, monkeypatch):
    """The check itself: a core module importing the server would be caught."""
    fake = tmp_path / "nvs"
    (fake / "core").mkdir(parents=True)
    (fake / "service").mkdir()
    (fake / "service" / "server.py").write_text("")
    bad = fake / "core" / "bad.py"
    bad.write_text("from ..service.server import Server\n")
    monkeypatch.setattr(__import__(__name__), "NVS", fake)
    assert imported_modules(bad) == {"gemshare_nvs.service.server"}
    assert "service" not in MAY_IMPORT[part_of(module_name(bad))]


def test_no_folder_holds_more_than_sixteen_sources_of_its_own():
    crowded = {}
    for top in ("nvs", "libnvs", "ctl", "plugin"):
        for folder in [REPO / top, *(p for p in (REPO / top).rglob("*") if p.is_dir())]:
            own = [p for p in folder.iterdir() if p.suffix in {".py", ".c", ".h"}]
            if len(own) > MAX_SOURCES_PER_FOLDER:
                crowded[str(folder.relative_to(REPO))] = len(own)
    assert crowded == {}
