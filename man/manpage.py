"""Man pages (roff, section 1) for gemshare's commands, made from the commands' own Typer/click
definitions: the name, the help, every option and argument with its help and default as --help
shows them (click's own help records), and each subcommand the same way. Nothing is written
twice, so a page says what --help says.

    python man/manpage.py DIR     writes DIR/COMMAND.1 for each of COMMANDS (make man)

Help text is read as the command's help reads it: click's paragraphs (rewrapped, unless a
paragraph opens with a \\b line), or, for a command with Rich markup (gemsharectl), the markup's
plain text with its line breaks kept; a paragraph of the epilog whose first line is all bold
becomes a section of its own (EXAMPLES, ENVIRONMENT, EXIT STATUS).
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import typer.main

from gemshare_nvs.version import version

# Each command pyproject.toml installs, and where its Typer app is.
COMMANDS = {
    "gemshare-scheduler": "gemshare_nvs.service.command_line:app",
    "gemsharectl": "gemshare_ctl.app:app",
    "gemshare-device-plugin": "gemshare_plugin.cli:app",
    "gemshare-dra-plugin": "gemshare_dra.cli:app",
    "gemshare-node-identity": "gemshare_nvs.identity_daemon:app",
}
SECTION = 1


def click_command(program: str):
    """The click command (or group) that runs `program`."""
    module, _, name = COMMANDS[program].partition(":")
    return typer.main.get_command(getattr(importlib.import_module(module), name))


# --- roff -------------------------------------------------------------------------------------

def escape(text: str) -> str:
    """Text as roff prints it literally: backslashes, hyphens (as \\-, so that options and names
    copied from the page work), ASCII quotes (never typographic ones), other characters by code
    point."""
    out = []
    for char in text:
        if char == "\\":
            out.append("\\e")
        elif char == "-":
            out.append("\\-")
        elif char == "'":
            out.append("\\(aq")
        elif char == "`":
            out.append("\\(ga")
        elif ord(char) > 126 or (ord(char) < 32 and char != "\t"):
            out.append(f"\\[u{ord(char):04X}]")
        else:
            out.append(char)
    return "".join(out)


def text_line(roff: str) -> str:
    """An input line of text: one that opens with a dot or a quote would be read as a request."""
    return "\\&" + roff if roff.startswith((".", "'")) else roff


def argument(text: str) -> str:
    """A macro's argument, quoted."""
    return '"' + escape(text).replace('"', "\\(dq") + '"'


def bold(text: str) -> str:
    return f"\\fB{escape(text)}\\fR"


def italic(text: str) -> str:
    return f"\\fI{escape(text)}\\fR"


def usage_roff(text: str) -> str:
    """A usage line's words (OPTIONS, COMMAND, FILE) in italics, its brackets and dots plain."""
    return re.sub(r"[A-Za-z_][\w-]*", lambda word: italic(word.group()),
                  text.replace("\\", "\\e"))


def tag_roff(record: str) -> str:
    """A help record's first column, `--tq, --set-tq SECONDS`: names bold, values italic."""
    parts = re.split(r"(, | / | )", record)
    return "".join(part if part in (", ", " / ", " ") else
                   bold(part) if part.startswith("-") else italic(part) for part in parts)


# --- help text ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Paragraph:
    lines: tuple[str, ...]
    keep_lines: bool  # printed line by line, as written (examples, tables)


def rich_markup(command) -> bool:
    return getattr(command, "rich_markup_mode", None) == "rich"


def plain(text: str, command) -> str:
    """What help prints of a text: without its Rich markup where the command has it."""
    if not rich_markup(command):
        return text
    from rich.text import Text
    return Text.from_markup(text).plain


def paragraphs(text: str | None, command) -> list[Paragraph]:
    """A help text's paragraphs, as the command's --help lays them out."""
    text = inspect.cleandoc(text or "").partition("\f")[0]
    found = []
    for index, block in enumerate(re.split(r"\n\s*\n", text)):
        lines = block.splitlines()
        if lines and lines[0].strip() == "\b":  # click: do not rewrap
            found.append(Paragraph(tuple(lines[1:]), True))
        elif rich_markup(command) and index > 0 and len(lines) > 1:
            found.append(Paragraph(tuple(plain(line, command) for line in lines), True))
        elif block.strip():
            joined = " ".join(line.strip() for line in lines)
            found.append(Paragraph((plain(joined, command),), False))
    return [paragraph for paragraph in found if any(line.strip() for line in paragraph.lines)]


def paragraph_roff(paragraph: Paragraph) -> list[str]:
    if not paragraph.keep_lines:
        return [text_line(escape(paragraph.lines[0]))]
    indent = min(len(line) - len(line.lstrip()) for line in paragraph.lines if line.strip())
    return [".nf", *(text_line(escape(line[indent:])) for line in paragraph.lines), ".fi"]


def body_roff(found: list[Paragraph]) -> list[str]:
    lines: list[str] = []
    for number, paragraph in enumerate(found):
        if number:
            lines.append(".PP")
        lines += paragraph_roff(paragraph)
    return lines


def summary(command) -> str:
    """The whatis line: the help's first sentence (or what comes before its first colon)."""
    found = paragraphs(command.help, command)
    first = found[0].lines[0] if found else ""
    return re.split(r"(?<=[a-z)])[.:](?:\s|$)", first, maxsplit=1)[0].strip()


BOLD_HEADING = re.compile(r"^\s*\[bold\](?P<title>[^\[\]]+)\[/bold\]\s*$")


def epilog_sections(command) -> list[tuple[str, list[Paragraph]]]:
    """The epilog, as (section title, paragraphs): a paragraph that opens with a bold line
    (Rich markup) starts a section of that name; what comes before any is NOTES."""
    if not command.epilog:
        return []
    sections: list[tuple[str, list[Paragraph]]] = []
    for block in re.split(r"\n\s*\n", command.epilog.strip("\n")):
        first, _, rest = block.partition("\n")
        heading = BOLD_HEADING.match(first) if rich_markup(command) else None
        if heading:
            sections.append((heading["title"].strip().upper(), []))
            block = rest
        elif not sections:
            sections.append(("NOTES", []))
        if rich_markup(command):
            lines = block.splitlines()
            found = [Paragraph(tuple(plain(line, command) for line in lines), True)] \
                if any(line.strip() for line in lines) else []
        else:
            found = paragraphs(block, command)
        sections[-1][1].extend(found)
    return sections


# --- the page -----------------------------------------------------------------------------------

def parameter_roff(command, context) -> list[str]:
    """One .TP entry per argument and option, the help option's included, as --help lists
    them; hidden ones left out, as --help leaves them."""
    lines: list[str] = []
    for param in command.get_params(context):
        record = param.get_help_record(context)
        if record is None or getattr(param, "hidden", False):
            continue
        tag, text = record
        lines += [".TP", text_line(tag_roff(tag))]
        text = plain(text, command).strip()
        lines += [text_line(escape(text))] if text else []
    return lines


def subcommands(command, context):
    """The visible subcommands of a group, in --help's order, each with its context."""
    for name in command.list_commands(context):
        sub = command.get_command(context, name)
        if sub is None or sub.hidden:
            continue
        yield sub, context_of(sub, name, context)


def context_of(command, name: str, parent=None):
    """The context --help runs in: the command's own settings (its help option's names)."""
    return command.context_class(command, info_name=name, parent=parent,
                                 **command.context_settings)


def usage(command, context) -> str:
    return " ".join(command.collect_usage_pieces(context))


def commands_roff(command, context) -> list[str]:
    """Each subcommand, nested ones under their group: its usage, its help, its parameters."""
    lines: list[str] = []
    for sub, sub_context in subcommands(command, context):
        path = sub_context.command_path
        lines += [f".SS {argument(path.partition(' ')[2])}",
                  text_line(f"{bold(path)} {usage_roff(usage(sub, sub_context))}"), ".PP"]
        if sub.deprecated:
            lines += ["(deprecated)", ".PP"]
        lines += body_roff(paragraphs(sub.help, sub))
        lines += parameter_roff(sub, sub_context)
        if hasattr(sub, "list_commands"):
            lines += commands_roff(sub, sub_context)
    return lines


def page(program: str, command) -> str:
    """The roff source of the man page of `program`, which runs the click `command`."""
    context = context_of(command, program)
    lines = [f".TH {argument(program.upper())} {SECTION} \"\" {argument('gemshare ' + version())} "
             f"{argument('User Commands')}",
             # Left-aligned and never hyphenated: paths and option names stay whole.
             ".ad l", ".nh",
             ".SH NAME", text_line(f"{escape(program)} \\- {escape(summary(command))}"),
             ".SH SYNOPSIS", text_line(f"{bold(program)} {usage_roff(usage(command, context))}"),
             ".SH DESCRIPTION", *body_roff(paragraphs(command.help, command)),
             ".SH OPTIONS", *parameter_roff(command, context)]
    if hasattr(command, "list_commands"):
        lines += [".SH COMMANDS", *commands_roff(command, context)]
    for title, found in epilog_sections(command):
        lines += [f".SH {argument(title)}", *body_roff(found)]
    others = [name for name in COMMANDS if name != program]
    lines += [".SH \"SEE ALSO\"",
              *(f".BR {escape(name)} ({SECTION}){',' if n < len(others) - 1 else ''}"
                for n, name in enumerate(others))]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python man/manpage.py DIR  (writes DIR/COMMAND.1 for each command)",
              file=sys.stderr)
        return 2
    directory = Path(argv[0])
    directory.mkdir(parents=True, exist_ok=True)
    for program in COMMANDS:
        path = directory / f"{program}.{SECTION}"
        path.write_text(page(program, click_command(program)), encoding="ascii")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
