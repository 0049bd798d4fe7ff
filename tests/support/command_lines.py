"""``gpu-finops`` command lines written in deployment files (Compose, Kubernetes), checked against the CLI itself."""

from __future__ import annotations

from typing import Any

import click
from typer.main import get_command

from finops.cli import app
from finops.cli.base import command_tree


class CommandLineError(ValueError):
    """A command line the CLI refuses."""


def resolve(argv: list[str]) -> tuple[list[str], Any]:
    """``gpu-finops <argv>`` → (its command path, the Click command), without parsing the options."""
    tree = {tuple(names): command for names, command in command_tree(get_command(app), [])}
    depth = max(n for n in range(len(argv) + 1) if tuple(argv[:n]) in tree)
    command: Any = tree[tuple(argv[:depth])]
    path = ["gpu-finops", *argv[:depth]]
    assert not hasattr(command, "list_commands"), f"{' '.join(path)} needs a subcommand"
    return path, command


def parse(argv: list[str]) -> list[str]:
    """Resolve ``gpu-finops <argv>`` to its command and parse its options without running it; the command path.
    CommandLineError when the CLI refuses them."""
    path, command = resolve(argv)
    try:
        command.make_context(" ".join(path), list(argv[len(path) - 1 :]))
    except Exception as exc:  # typer's own click raises its UsageError: report it as ours
        raise CommandLineError(f"{' '.join(path)}: {exc}") from exc
    return path


def parsed_options(argv: list[str]) -> dict[str, Any]:
    """The parameters of ``gpu-finops <argv>`` after parsing (defaults filled in), by parameter name."""
    path, command = resolve(argv)
    context: click.Context = command.make_context(" ".join(path), list(argv[len(path) - 1 :]))
    return dict(context.params)


def environment_variables(argv: list[str]) -> set[str]:
    """The environment variables the options of the command ``gpu-finops <argv>`` read (``envvar=``)."""
    _, command = resolve(argv)
    names: set[str] = set()
    for parameter in command.params:
        envvar = getattr(parameter, "envvar", None)
        names.update([envvar] if isinstance(envvar, str) else envvar or [])
    return names
