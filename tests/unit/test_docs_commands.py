"""The docs show commands that work: every `mptfx ...` line in a code block of README.md and
docs/ names real sub-commands and options, and a line that is a whole command (no `[...]`
synopsis, no placeholder) parses with the real argument parser. The generated reference pages
are what scripts/write_reference_docs.py writes."""

from __future__ import annotations

import argparse
import importlib.util
import re
import shlex
from pathlib import Path

import pytest

from pipelines.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
GENERATED = {REPO / "docs" / "reference" / "cli.md"}
_PROMPT = re.compile(r"^(?:\$ )?(?:[A-Z_]+=\S+ )*(?:\.venv/bin/)?mptfx\s")
_SYNOPSIS = re.compile(r"[\[\]|<>]|\.\.\.|\$|\bRUN\b|\bNODE\b|\bVERSION\b|\bDIR\b|\bFILE\b")


def _balanced(text: str) -> bool:
    try:
        shlex.split(text)
    except ValueError:  # a quote spans the next line
        return False
    return True


def _code_lines(page: Path) -> list[tuple[int, str]]:
    """(line number, command) of each `mptfx` line in the page's shell code blocks (bash,
    sh, console or unlabelled), with backslash continuations and quoted values spanning lines
    joined and its trailing comment cut."""
    found, fence, shell, pending = [], False, False, None
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            fence = not fence
            shell = fence and line.strip()[3:] in ("", "bash", "sh", "console", "shell")
            continue
        if not shell:
            continue
        text = line.strip()
        if pending is None and _PROMPT.match(text):
            pending = (number, text[text.index("mptfx"):])
        elif pending is not None:
            pending = (pending[0], pending[1] + " " + text)
        else:
            continue
        if pending[1].endswith("\\"):
            pending = (pending[0], pending[1][:-1])
        elif _balanced(re.split(r"\s+#\s", pending[1], maxsplit=1)[0]):
            found.append(pending)
            pending = None
    return [(n, re.split(r"\s+#\s", c, maxsplit=1)[0].strip()) for n, c in found]


def _commands() -> list[tuple[str, str]]:
    return [(f"{page.relative_to(REPO)}:{number}", command) for page in PAGES
            if page not in GENERATED for number, command in _code_lines(page)]


def _subparser(parser: argparse.ArgumentParser, words: list[str]):
    """The parser of the deepest sub-command `words` name, and the words after it."""
    while words:
        choices = next((a.choices for a in parser._actions
                        if isinstance(a, argparse._SubParsersAction)), None)
        if not choices or words[0] not in choices:
            break
        parser, words = choices[words[0]], words[1:]
    return parser, words


COMMANDS = _commands()


def test_the_docs_show_commands():
    assert len(COMMANDS) > 40, COMMANDS  # the README and the guides show dozens


@pytest.mark.parametrize("where, command", COMMANDS, ids=[w for w, _ in COMMANDS])
def test_a_documented_command_is_real(where, command):
    words = shlex.split(command)[1:]
    parser, rest = _subparser(build_parser(), words)
    assert parser.prog != "mptfx", f"{where}: no sub-command in {command!r}"
    options = {o for a in parser._actions for o in a.option_strings}
    for word in rest:
        option = word.split("=", 1)[0]
        if option.startswith("--"):
            assert option in options, f"{where}: {parser.prog} has no option {option}"
    if not _SYNOPSIS.search(command):
        try:
            build_parser().parse_args(words)
        except SystemExit as exit_:
            pytest.fail(f"{where}: {command!r} does not parse (exit {exit_.code})")


def test_the_reference_pages_are_current():
    spec = importlib.util.spec_from_file_location(
        "write_reference_docs", REPO / "scripts" / "write_reference_docs.py")
    writer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(writer)
    assert writer.CLI_PAGE.read_text() == writer.render_cli(), \
        "run: python scripts/write_reference_docs.py"
    assert writer.CONFIG_PAGE.read_text() == writer.render_configuration(), \
        "run: python scripts/write_reference_docs.py"


_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_the_readme_is_read_in_five_minutes():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; the rest belongs in docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_every_relative_link_reaches_a_file(page):
    missing = [target for target in _LINK.findall(page.read_text())
               if "://" not in target and not target.startswith("mailto:")
               and not (page.parent / target).exists()]
    assert missing == [], f"{page.relative_to(REPO)} links to missing {missing}"
