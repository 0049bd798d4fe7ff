"""What the whole command line shares and a GPU node can load: the root command group, which turns every
:class:`~finops.errors.FinopsError` into one ``error: …`` line and exit code 2, the ``--verbose`` logging
switch, and the stand-in commands registered when the service extra is not installed.

Only the standard library, typer and :mod:`finops.errors` are imported here: this module is loaded by
``gpu-finops collector`` on nodes that have the base dependencies only.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from finops.errors import FinopsError

INCOMPLETE = 1
"""Exit code when the command ran but part of its input was refused (bad lines, unknown ids) or an external
command or server it relies on failed (sacct, Prometheus, a webhook)."""

USER_ERROR = 2
"""Exit code of a user error: bad input or option, a refused file, a database not migrated."""

SERVICE_COMMANDS = (
    "serve",
    "scheduler",
    "dashboard",
    "rollup",
    "report",
    "demo",
    "db",
    "import",
    "team",
    "budget",
    "prices",
    "alerts",
    "export",
    "idle",
)
"""Every top-level command but ``collector``: each needs the service extra (``gpu-finops[service]``)."""

SERVICE_DEPENDENCIES = frozenset(
    {"alembic", "apscheduler", "fastapi", "psycopg", "pyarrow", "sqlalchemy", "starlette", "uvicorn", "yaml"}
)
"""Top-level modules of the service extra's packages (``yaml`` is PyYAML's)."""


class FinopsGroup(TyperGroup):
    """The root ``gpu-finops`` group: a :class:`~finops.errors.FinopsError` raised by any command below it is
    printed as ``error: <message>`` on stderr and ends the process with exit code 2 (:data:`USER_ERROR`).

    Commands therefore just raise; this is the one place that turns user errors into an exit code. Other
    exceptions (bugs) keep their traceback.
    """

    def invoke(self, ctx: Any) -> Any:  # click's Context, vendored by typer as typer._click
        """Run the command line; FinopsError → ``error: …`` on stderr and ``typer.Exit(2)``."""
        try:
            return super().invoke(ctx)
        except FinopsError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(USER_ERROR) from exc


def configure_logging(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log at DEBUG level.")] = False,
) -> None:
    """The root callback: log to stderr at INFO (DEBUG with ``--verbose``); httpx and Alembic from WARNING."""
    for chatty in ("httpx", "alembic"):
        logging.getLogger(chatty).setLevel(logging.WARNING)
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


def missing_service_dependency(exc: ModuleNotFoundError) -> bool:
    """Whether ``exc`` is the import of a service-extra package (:data:`SERVICE_DEPENDENCIES`) failing."""
    return (exc.name or "").partition(".")[0] in SERVICE_DEPENDENCIES


def add_service_stand_ins(app: typer.Typer) -> None:
    """Register every name of :data:`SERVICE_COMMANDS` on ``app`` as a command that takes any arguments and
    only says, on one stderr line, that it needs the service extra; it exits with code 2."""
    for name in SERVICE_COMMANDS:
        app.command(
            name,
            help="Needs the service extra: pip install 'gpu-finops[service]'.",
            add_help_option=False,
            context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
        )(_stand_in(name))


def _stand_in(name: str) -> Any:
    def command() -> None:
        typer.echo(f"gpu-finops {name} needs the service extra: pip install 'gpu-finops[service]'", err=True)
        raise typer.Exit(USER_ERROR)

    return command
