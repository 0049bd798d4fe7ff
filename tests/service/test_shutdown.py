"""SIGTERM to a real ``gpu-finops scheduler`` or ``serve`` process in the middle of a rollup of 1.4 M readings, on an
SQLite file and on PostgreSQL: the process exits 0 within seconds, the rollup's transaction is rolled back (the ledger
tables are as they were before it), a REST write waiting for SQLite's write lock is answered, and the next rollup
builds what an uninterrupted one did. The signal comes as soon as the first rollup begins (the scheduled jobs start
once the process's HTTP server listens, its signal handlers in place), or for ``serve`` also once a REST write is
under way."""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from finops.db.engine import session_factory
from finops.db.hours import mark_hours_dirty
from finops.ingest.partitions import create_partitions, is_partitioned
from finops.ledger.rollup import rollup
from finops.ledger.sql import LEDGER_COLUMNS
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.timeutil import HOUR, floor_hour
from tests.support.servers import free_port

REPO = Path(__file__).resolve().parents[2]
GPUS = 32
HOURS = 12
EXIT_SECONDS = 10
PRICING = Pricing(load_catalog(), PricingModel.ON_DEMAND)
LEDGER_TABLES = ("ledger", "ledger_team_hours", "ledger_dirty_hours")
_SERIES = {  # 0 … :n - 1 as column i
    "sqlite": "(WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i + 1 < :n) SELECT i FROM s)",
    "postgresql": "(SELECT generate_series(0, :n - 1) AS i)",
}


def _store(engine: Engine, start: int, end: int) -> None:
    """``GPUS`` H100s in service from ``start``, read every second until ``end``; the even ones carry the energy
    counter, the odd ones do not."""
    with engine.begin() as c:
        c.execute(text("INSERT INTO nodes (hostname) VALUES ('n1')"))
        c.execute(
            text(
                "INSERT INTO gpus (uuid, node_id, gpu_index, model, in_service_from) "
                "SELECT 'GPU-' || i, 1, i, 'NVIDIA H100 80GB HBM3', :start FROM " + _SERIES[engine.dialect.name] + " s"
            ),
            {"n": GPUS, "start": start},
        )
        if is_partitioned(c):
            create_partitions(c, range(start, end + 86_400, 86_400))
        c.execute(
            text(
                "INSERT INTO gpu_samples (gpu_id, ts, utilization_ratio, energy_joules) "
                "SELECT g.id, :start + s.i, (s.i % 100) / 100.0, CASE WHEN g.id % 2 = 0 THEN 1e6 + 400.0 * s.i END "
                "FROM gpus g CROSS JOIN " + _SERIES[engine.dialect.name] + " s"
            ),
            {"n": end - start, "start": start},
        )


def _ledger(session: Session) -> list[tuple[Any, ...]]:
    """The ledger's rows without their ids, sorted."""
    return sorted(tuple(row) for row in session.execute(text(f"SELECT {', '.join(LEDGER_COLUMNS)} FROM ledger")))


def _tables(session: Session) -> dict[str, list[tuple[Any, ...]]]:
    """The ledger tables' rows, sorted."""
    return {
        name: sorted(tuple(row) for row in session.execute(text(f"SELECT * FROM {name}"))) for name in LEDGER_TABLES
    }


def _start(command: str, url: str) -> tuple[subprocess.Popen[str], queue.Queue[str], int]:
    """``gpu-finops -v COMMAND`` on ``url``, its stderr lines in a queue as they come, and its HTTP port."""
    port = free_port()
    options = ["--port", str(port), "--insecure-no-token"] if command == "serve" else ["--metrics-port", str(port)]
    environment = {key: value for key, value in os.environ.items() if not key.startswith("FINOPS_")}
    environment |= {
        "FINOPS_DATABASE_URL": url,
        "FINOPS_ROLLUP_INTERVAL_SECONDS": "3600",
        "FINOPS_SACCT_SCHEDULE_SECONDS": "0",  # sacct may be on the PATH (a live Slurm's client)
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "finops.cli", "-v", command, *options],
        cwd=REPO,
        env=environment,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    return process, lines, port


def _wait_for(lines: queue.Queue[str], words: str, seen: list[str]) -> None:
    """Block until a line containing ``words`` comes (every line read is added to ``seen``); fails after 120 s."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            continue
        seen.append(line)
        if words in line:
            return
    pytest.fail(f"no line with {words!r} in 120 s:\n{''.join(seen)}")


def _write_under_way(port: int) -> socket.socket:
    """A budget PUT to ``port`` that the server has begun: sent with ``Expect: 100-continue``, its body follows the
    ``100 Continue`` that uvicorn sends once the app reads it. Returns the connection, for :func:`_answer`."""
    body = b'{"amount": "100", "currency": "USD"}'
    deadline = time.monotonic() + 60
    while True:
        try:
            connection = socket.create_connection(("127.0.0.1", port), timeout=EXIT_SECONDS)
            break
        except ConnectionRefusedError:  # not listening yet
            assert time.monotonic() < deadline, f"nothing listens on {port}"
            time.sleep(0.1)
    connection.sendall(
        b"PUT /api/v1/budgets/ml/2030-01?allow_unknown_team=true HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body)
    )
    assert connection.recv(1024).startswith(b"HTTP/1.1 100"), "the server read the request"
    connection.sendall(body)
    return connection


def _answer(connection: socket.socket) -> bytes:
    """The first response bytes on ``connection`` after the ``100 Continue`` (b"" if it was closed without one)."""
    with connection:
        return connection.recv(1024)


@pytest.mark.parametrize(
    ("command", "writing"),
    [("scheduler", False), ("serve", False), ("serve", True)],
    ids=["scheduler", "serve", "serve-writing"],
)
def test_sigterm_in_the_middle_of_a_rollup_stops_the_process_and_rolls_the_rollup_back(
    engine: Engine, database_url: str, command: str, writing: bool
) -> None:
    sessions = session_factory(engine)
    now = int(time.time())
    start = floor_hour(now) - HOURS * HOUR
    _store(engine, start, now)
    with sessions.begin() as session:
        rollup(session, PRICING, now)
    with sessions() as session:
        uninterrupted = _ledger(session)
    with sessions.begin() as session:
        mark_hours_dirty(session, range(start, floor_hour(now), HOUR))
    with sessions() as session:
        before = _tables(session)

    process, lines, port = _start(command, database_url)
    seen: list[str] = []
    try:
        _wait_for(lines, "rebuilding", seen)
        if writing:  # a REST write under way, which on SQLite waits for the rollup's write lock
            writer = _write_under_way(port)
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=EXIT_SECONDS)
    finally:
        if process.poll() is None:
            process.kill()
    _wait_for(lines, "stopped by the shutdown", seen)
    assert code == 0, "".join(seen)
    if writing:
        assert _answer(writer).startswith(b"HTTP/1.1 204"), "the write under way when the signal came is answered"
    with sessions() as session:
        assert _tables(session) == before, "the interrupted rollup's transaction was rolled back"
    with sessions.begin() as session:
        rollup(session, PRICING, now)
    with sessions() as session:
        assert _ledger(session) == uninterrupted
