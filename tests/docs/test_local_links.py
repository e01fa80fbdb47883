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
        return f"no file {target.relative_to(REPO) if target.is_relative_to(REPO) else target}"
    if anchor and target.suffix == ".md" and anchor not in anchors(target):
        return f"no heading in {target.relative_to(REPO)} makes the anchor #{anchor}"
    return None


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
