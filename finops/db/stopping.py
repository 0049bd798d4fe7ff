"""Stopping the database work of a process that is shutting down, at once and without committing it.

A :class:`StopSwitch` watches one engine. Once :meth:`StopSwitch.stop` is called, every statement a connection of
that engine starts raises :class:`Stopped`, and every statement under way is interrupted: SQLite's
``sqlite3_interrupt`` (the statement fails "interrupted"), PostgreSQL's cancel request (it fails with
``query_canceled``). Either way the work's transaction is left to roll back, as after any error: nothing of it is
committed. A long transaction (a rollup of days of readings) therefore ends within a statement's start, not at its
end.
"""

from __future__ import annotations

import sqlite3
import threading
from typing import Any

import psycopg
from sqlalchemy import Engine, event

CANCEL_TIMEOUT_SECONDS = 2.0
"""How long a PostgreSQL cancel request may take to be delivered before it is given up."""


class Stopped(Exception):
    """A statement was refused because the process is shutting down (:meth:`StopSwitch.stop`)."""


class StopSwitch:
    """Stops the statements of ``engine``'s connections once :meth:`stop` is called (the module says how)."""

    def __init__(self, engine: Engine) -> None:
        self._stopped = threading.Event()
        self._lock = threading.RLock()  # re-entrant: stop() may run in a signal handler of a thread inside it
        self._executing: dict[int, Any] = {}  # DBAPI connections running a statement, by their Connection's id
        event.listen(engine, "before_cursor_execute", self._starting)
        event.listen(engine, "after_cursor_execute", self._ended)
        event.listen(engine, "handle_error", self._failed)

    @property
    def stopped(self) -> bool:
        """Whether :meth:`stop` was called."""
        return self._stopped.is_set()

    def stop(self) -> None:
        """Refuse every statement from now on and interrupt those under way. Safe to call again (a statement that
        started as the previous call came, before it could be interrupted, is interrupted then) and from any
        thread or signal handler."""
        self._stopped.set()
        with self._lock:
            executing = list(self._executing.values())
        for connection in executing:
            _interrupt(connection)

    def _starting(self, conn: Any, cursor: Any, *_: Any) -> None:
        with self._lock:
            if self._stopped.is_set():
                raise Stopped("the process is shutting down: no more statements")
            self._executing[id(conn)] = cursor.connection

    def _ended(self, conn: Any, *_: Any) -> None:
        with self._lock:
            self._executing.pop(id(conn), None)

    def _failed(self, context: Any) -> None:
        self._ended(context.connection)


def _interrupt(connection: Any) -> None:
    """Interrupt the statement ``connection`` (a DBAPI connection: sqlite3 or psycopg) is running, if any."""
    if isinstance(connection, sqlite3.Connection):
        connection.interrupt()
    elif isinstance(connection, psycopg.Connection):
        connection.cancel_safe(timeout=CANCEL_TIMEOUT_SECONDS)
