"""What the whole command line shares and a GPU node can load: the root command group, which turns every
:class:`~finops.errors.FinopsError` into one ``error: …`` line and exit code 2, the ``--verbose`` logging
switch, and the stand-in commands registered when the service extra is not installed.

Only the standard library, typer and :mod:`finops.errors` are imported here: this module is loaded by
``gpu-finops collector`` on nodes that have the base dependencies only.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from finops.errors import FinopsError

INCOMPLETE = 1
"""Exit code when the command ran but part of its input was refused (bad lines, unknown ids) or an external
command or server it relies on failed (sacct, Prometheus, a webhook)."""

USER_ERROR = 2
"""Exit code of a user error: bad input or option, a refused file, a database not migrated."""

SERVICE_COMMANDS: dict[str, str] = {
    "serve": "serve",
    "scheduler": "serve",
    "dashboard": "serve",
    "rollup": "report",
    "report": "report",
    "commitments": "commitments",
    "rightsizing": "rightsizing",
    "mfu": "mfu",
    "demo": "demo",
    "db": "db",
    "import": "imports",
    "team": "teams",
    "budget": "budget",
    "prices": "prices",
    "nodes": "nodes",
    "idle": "idle",
    "alerts": "alerts",
    "nudges": "nudges",
    "audit": "audit",
    "export": "export",
    "showback": "showback",
    "api-token": "api_tokens",
}
"""Every top-level command but ``collector`` → the ``finops.cli`` module whose ``app`` defines it (a command, or a
group when the module's Typer is named). Each needs the service extra (``gpu-finops[service]``) and is imported
only when it is run or listed, so a command loads only what it uses."""

SERVICE_DEPENDENCIES = frozenset(
    {"alembic", "apscheduler", "fastapi", "psycopg", "pyarrow", "sqlalchemy", "starlette", "uvicorn", "yaml"}
)
"""Top-level modules of the service extra's packages (``yaml`` is PyYAML's)."""


class FinopsGroup(TyperGroup):
    """The root ``gpu-finops`` group: a user error raised by any command below it (a
    :class:`~finops.errors.FinopsError`, a missing file, an unreachable database: :func:`user_error_message`) is
    printed as ``error: <message>`` on stderr and ends the process with exit code 2 (:data:`USER_ERROR`).

    Commands therefore just raise; this is the one place that turns user errors into an exit code. Other
    exceptions (bugs) keep their traceback.

    The service commands (:data:`SERVICE_COMMANDS`) are loaded when they are looked up (Click's lazy group
    pattern), so ``gpu-finops collector`` or ``gpu-finops report`` does not import the web service, the
    scheduler or the alert engine. Without the service extra a service command is a stand-in that says so.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        reflow_help(self)

    def list_commands(self, ctx: Any) -> list[str]:
        """The registered commands and every service command, by name."""
        return sorted({*super().list_commands(ctx), *SERVICE_COMMANDS})

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        """The command ``cmd_name``, importing its module the first time a service command is asked for."""
        if cmd_name in SERVICE_COMMANDS and cmd_name not in self.commands:
            for name, command in _service_commands(SERVICE_COMMANDS[cmd_name]).items():
                self.add_command(reflow_help(command), name)
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: Any) -> Any:  # click's Context, vendored by typer as typer._click
        """Run the command line; a user error (:func:`user_error_message`) → ``error: …`` on stderr, the traceback
        at DEBUG (``--verbose``), and ``typer.Exit(2)``."""
        try:
            return super().invoke(ctx)
        except BrokenPipeError:  # the reader went away (`gpu-finops report | head`): stop quietly, as tools do
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush at exit
            raise typer.Exit(INCOMPLETE) from None
        except Exception as exc:
            message = user_error_message(exc)
            if message is None:
                raise
            logging.getLogger(__name__).debug("user error", exc_info=exc)
            typer.echo(f"error: {message}", err=True)
            raise typer.Exit(USER_ERROR) from exc


def help_paragraphs(text: str | None) -> list[str]:
    """The paragraphs of a help text (a docstring: paragraphs apart by blank lines), each on one line: its lines
    joined by a space, or without one where the break is inside a ``code span``."""
    paragraphs = []
    for block in re.split(r"\n\s*\n", (text or "").strip()):
        joined = ""
        for line in block.replace("\b", "").splitlines():
            line = line.strip()
            inside_code = joined.count("`") % 2 == 1
            joined += ("" if not joined or inside_code else " ") + line
        if joined:
            paragraphs.append(joined)
    return paragraphs


def reflow_help(command: Any) -> Any:
    """``command`` (a Click command or group) with its help text, and that of every command below it, rewritten as
    :func:`help_paragraphs` apart by blank lines; returns it.

    Typer's help formatter keeps a help text's line breaks and wraps each line to the terminal on its own, so a
    docstring wrapped at 120 columns reads as ragged lines on an 80-column terminal; with a paragraph on one line
    the formatter wraps it whole, at any width."""
    if command.help:
        command.help = "\n\n".join(help_paragraphs(command.help))
    for sub in getattr(command, "commands", {}).values():
        reflow_help(sub)
    return command


ENVIRONMENT_ERRORS: dict[type[Exception], Callable[[Exception], str]] = {}
"""Errors of the environment rather than of the code, by class → their one-line message; a module that meets one
registers it (:mod:`finops.cli.context` registers the database driver's "cannot connect" error)."""


def user_error_message(exc: Exception) -> str | None:
    """The one line a user is shown for ``exc`` when it is theirs to fix, else None (a bug: its traceback stays).

    Theirs: a :class:`~finops.errors.FinopsError`; an ``OSError`` (a file or folder missing or unreadable, a port
    taken: ``<file>: <reason>``); an error class in :data:`ENVIRONMENT_ERRORS`."""
    if isinstance(exc, FinopsError):
        return str(exc)
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        return where + (exc.strerror or str(exc))
    for kind, describe in ENVIRONMENT_ERRORS.items():
        if isinstance(exc, kind):
            return " ".join(describe(exc).split())
    return None


def command_tree(command: Any, path: list[str]) -> list[tuple[list[str], Any]]:
    """``command`` (at ``path``) and every command below it as (path, Click command), depth first, subcommands by
    name. Lazily loaded service commands are loaded on the way, so this is the whole command line."""
    found = [(path, command)]
    if hasattr(command, "list_commands"):
        context = typer.Context(command, info_name=path[-1] if path else None)
        for name in sorted(command.list_commands(context)):
            found.extend(command_tree(command.get_command(context, name), [*path, name]))
    return found


LONG_RUNNING_COMMANDS = frozenset(
    {"collector", *(name for name, module in SERVICE_COMMANDS.items() if module == "serve")}
)
"""Commands that run until stopped (``collector`` and those of ``finops.cli.serve``): their log is all they say, so
it starts at INFO. The others print what they did themselves, and log from WARNING."""


def configure_logging(
    ctx: typer.Context,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log at DEBUG level.")] = False,
) -> None:
    """The root callback: :func:`log_to_stderr` at INFO for the long-running commands (:data:`LONG_RUNNING_COMMANDS`),
    from WARNING for the others, at DEBUG with ``--verbose``."""
    long_running = ctx.invoked_subcommand in LONG_RUNNING_COMMANDS
    log_to_stderr(logging.DEBUG if verbose else logging.INFO if long_running else logging.WARNING)


def log_to_stderr(level: int) -> None:
    """Log records from ``level`` up to stderr, one line each; httpx, Alembic and APScheduler (a line as each
    scheduled run starts and ends) from WARNING."""
    for chatty in ("httpx", "alembic", "apscheduler"):
        logging.getLogger(chatty).setLevel(logging.WARNING)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def missing_service_dependency(exc: ModuleNotFoundError) -> bool:
    """Whether ``exc`` is the import of a service-extra package (:data:`SERVICE_DEPENDENCIES`) failing."""
    return (exc.name or "").partition(".")[0] in SERVICE_DEPENDENCIES


def _service_commands(module_name: str) -> dict[str, Any]:
    """The Click commands of ``finops.cli.<module_name>`` by name; without the service extra, a stand-in for each
    service command of that module, which takes any arguments and only says, on one stderr line, that it needs
    the extra (exit code 2)."""
    try:
        module = importlib.import_module(f"finops.cli.{module_name}")
    except ModuleNotFoundError as exc:
        if not missing_service_dependency(exc):
            raise
        names = [name for name, module in SERVICE_COMMANDS.items() if module == module_name]
        return {name: _stand_in(name) for name in names}
    holder = typer.Typer()
    holder.add_typer(module.app)
    return dict(typer.main.get_group(holder).commands)


def _stand_in(name: str) -> Any:
    holder = typer.Typer()

    @holder.command(
        name,
        help="Needs the service extra: pip install 'gpu-finops[service]'.",
        add_help_option=False,
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )
    def command() -> None:
        typer.echo(f"gpu-finops {name} needs the service extra: pip install 'gpu-finops[service]'", err=True)
        raise typer.Exit(USER_ERROR)

    @holder.command("__placeholder__", hidden=True)
    def placeholder() -> None:
        """Keeps ``holder`` a group, so its commands can be taken by name."""

    return typer.main.get_group(holder).commands[name]
