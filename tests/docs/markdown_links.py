"""The local links of a markdown file and the anchors its headings make, as GitHub renders them.

Links inside code (fenced blocks, `spans`) are text, not links. A heading's anchor is GitHub's
slug of its rendered text: markup dropped (`code` keeps its text, a link its words), lowercase,
every character but letters, digits, spaces, `-` and `_` dropped, each space a `-`; a repeated
slug gets `-1`, `-2`, ... . `<a id=...>` and `<a name=...>` make anchors too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
# [text](target "title"): the text may hold one level of brackets, the target no space.
INLINE_LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]"
                         r"\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
HTML_ANCHOR = re.compile(r"<a\s[^>]*\b(?:id|name)=\"([^\"]+)\"")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


@dataclass(frozen=True)
class Link:
    source: Path
    line: int
    target: str  # as written: path, path#anchor or #anchor


def prose_lines(text: str):
    """(line number, line) of every line outside fenced code blocks."""
    fenced = None
    for number, line in enumerate(text.splitlines(), 1):
        opening = FENCE.match(line)
        if opening:
            if fenced is None:
                fenced = opening[1]
            elif opening[1] == fenced:
                fenced = None
            continue
        if fenced is None:
            yield number, line


def local_links(path: Path) -> list[Link]:
    """Every link of the file to a path or an anchor (not to a URL with a scheme)."""
    found = []
    for number, line in prose_lines(path.read_text()):
        text = CODE_SPAN.sub("", line)
        targets = [m[2] for m in INLINE_LINK.finditer(text)]
        reference = REFERENCE.match(text)
        if reference:
            targets.append(reference[1])
        found += [Link(path, number, t) for t in targets if t and not SCHEME.match(t)]
    return found


def slug(heading: str) -> str:
    text = CODE_SPAN.sub(lambda m: m[2], heading)
    text = INLINE_LINK.sub(lambda m: m[1], text)
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = re.sub(r"[*_]{1,3}(\S(?:.*?\S)?)[*_]{1,3}", r"\1", text)  # emphasis
    text = text.strip().lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor a link to `path#...` may name."""
    made: dict[str, int] = {}
    found = set()
    for _, line in prose_lines(path.read_text()):
        found |= set(HTML_ANCHOR.findall(line))
        heading = HEADING.match(line)
        if not heading:
            continue
        base = slug(heading[1])
        count = made.get(base, 0)
        made[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found
