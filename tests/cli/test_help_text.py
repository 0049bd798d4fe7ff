"""Every command's ``--help`` reads as its docstring is written: each paragraph of the help text wrapped as one
paragraph to the terminal's width, whatever width the docstring's own lines were wrapped at."""

from __future__ import annotations

import itertools

import pytest
import typer
from typer.testing import CliRunner

from finops.cli import app
from finops.cli.base import command_tree, help_paragraphs

PROGRAM = "gpu-finops"
COMMANDS = [
    (path, command)
    for path, command in command_tree(typer.main.get_command(app), [PROGRAM])
    if not command.hidden and command.help
]
PADDING = 1
"""Spaces the help formatter puts either side of the help text."""


def _rendered_paragraphs(output: str) -> list[list[str]]:
    """The lines of each paragraph of the help text in a ``--help`` output: between the usage line and the first
    box (options, commands), paragraphs apart by blank lines, padding stripped."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("Usage:")) + 1
    end = next((i for i, line in enumerate(lines) if line.lstrip().startswith("╭")), len(lines))
    paragraphs: list[list[str]] = [[]]
    for line in lines[start:end]:
        text = line[PADDING:].rstrip()
        if text:
            paragraphs[-1].append(text)
        elif paragraphs[-1]:
            paragraphs.append([])
    return [p for p in paragraphs if p]


def _ragged(lines: list[str], width: int) -> list[str]:
    """The lines of a wrapped paragraph that end before ``width`` although the next line's first word would have
    fitted on them: a line break the writer put there, not the wrapping."""
    return [line for line, following in itertools.pairwise(lines) if len(line) + 1 + len(following.split()[0]) <= width]


def test_the_commands_are_all_there() -> None:
    names = {" ".join(path[1:]) for path, _ in COMMANDS}
    assert {"report", "rollup", "collector", "import sacct", "alerts silence"} <= names, sorted(names)


@pytest.mark.parametrize("columns", [80, 200])
@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=[" ".join(p[1:]) or PROGRAM for p, _ in COMMANDS])
def test_help_wraps_each_paragraph_as_one(path: list[str], command: object, columns: int) -> None:
    result = CliRunner().invoke(app, [*path[1:], "--help"], env={"COLUMNS": str(columns), "TERMINAL_WIDTH": None})
    assert result.exit_code == 0, result.output
    width = columns - 2 * PADDING
    expected = help_paragraphs(command.help)  # type: ignore[attr-defined]
    rendered = _rendered_paragraphs(result.output)
    # Nothing lost or added (a word longer than the line is cut into pieces, so compare without white space).
    assert ["".join("".join(lines).split()) for lines in rendered] == ["".join(p.split()) for p in expected]
    for lines in rendered:
        assert max(len(line) for line in lines) <= width, lines
        assert _ragged(lines, width) == [], f"lines cut short at {columns} columns:\n" + "\n".join(lines)
