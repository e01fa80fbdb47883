"""Every local link of the README and the docs leads somewhere: the file it names exists, and
the anchor it names is a heading there (GitHub's anchors: markdown_links.py)."""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path

import pytest
from markdown_links import Link, anchors, local_links, prose_lines, slug

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")),
         REPO / "libnvs" / "README.md", REPO / "bench" / "README.md"]


def problem(link: Link) -> str | None:
    """Why the link leads nowhere, or None."""
    path, _, anchor = link.target.partition("#")
    target = (link.source.parent / urllib.parse.unquote(path)).resolve() if path else link.source
    if not target.exists():
        return f"no file {shown(target)}"
    if anchor and target.suffix == ".md" and anchor not in anchors(target):
        return f"no heading in {shown(target)} makes the anchor #{anchor}"
    return None


def shown(path: Path) -> Path:
    return path.relative_to(REPO) if path.is_relative_to(REPO) else path


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_local_link_leads_somewhere(page):
    dead = [f"{link.source.relative_to(REPO)}:{link.line}: ({link.target}) {why}"
            for link in local_links(page) if (why := problem(link))]
    assert dead == [], "\n".join(dead)


def test_the_readme_has_a_table_of_contents_of_its_sections():
    readme = REPO / "README.md"
    text = readme.read_text()
    assert "\n## Contents\n" in text
    contents = text.split("\n## Contents\n", 1)[1].split("\n## ", 1)[0]
    # Its top-level entries, in order, are the README's sections (## headings) after it.
    listed = [m[1] for m in re.finditer(r"^- \[[^\]]+\]\(#([^)]+)\)", contents, re.M)]
    sections = [slug(heading[1]) for _, line in prose_lines(text)
                if (heading := re.match(r"^## (.*)", line)) and heading[1] != "Contents"]
    assert listed == sections
    # Every entry, nested ones included, names an anchor of the README.
    entries = re.findall(r"\]\(#([^)]+)\)", contents)
    assert entries and set(entries) <= anchors(readme), set(entries) - anchors(readme)


def test_the_slugs_are_githubs():
    assert slug("Mode auto") == "mode-auto"
    assert slug("When memory does not fit: handoffs move only what is needed") == \
        "when-memory-does-not-fit-handoffs-move-only-what-is-needed"
    assert slug("`gemsharectl top`") == "gemsharectl-top"
    assert slug("Gangs (multi-GPU jobs)") == "gangs-multi-gpu-jobs"
    assert slug("snake_case and C++") == "snake_case-and-c"


def test_dead_links_and_anchors_are_found_and_code_is_not_a_link(tmp_path):
    (tmp_path / "other.md").write_text("# Other page\n\n## A `code` heading\n\n## A code heading\n")
    page = tmp_path / "page.md"
    page.write_text("# Page\n\n"
                    "[fine](other.md#a-code-heading-1) [here](#page) [web](https://example.org/x)\n"
                    "[gone](missing.md) [no anchor](other.md#nowhere) `[in code](missing.md)`\n"
                    "```\n[in a block](missing.md)\n```\n")
    found = {link.target: problem(link) for link in local_links(page)}
    assert found == {"other.md#a-code-heading-1": None, "#page": None,
                     "missing.md": f"no file {tmp_path / 'missing.md'}",
                     "other.md#nowhere":
                         f"no heading in {tmp_path / 'other.md'} makes the anchor #nowhere"}
