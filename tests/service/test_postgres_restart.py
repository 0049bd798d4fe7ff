"""PostgreSQL stopped and started again under ingest load, with real processes: a private cluster
(:mod:`tests.support.private_postgres`), ``gpu-finops serve`` on it, and a node posting one reading per request
all along, through a stop and start and a ``pg_ctl restart -m fast``. Every reading answered 200 is stored; while
the database is down, ingest and ``/healthz`` answer 503 with ``Retry-After`` (a collector keeps the readings spooled
and sends them again), never 500; once the database is back, the same ``serve`` process stores again, without a
restart."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
from sqlalchemy import func, select

from finops.db.engine import make_engine, session_factory, upgrade
from finops.db.models import GpuSample
from finops.ingest.node_tokens import create_token
from finops.timeutil import to_epoch, utc_now
from tests.support.private_postgres import private_postgres
from tests.support.servers import serve_process

NODE = "pg-restart-01"
UUID = "GPU-99999999-0000-0000-0000-000000000000"
WAIT_SECONDS = 60
"""Longest wait for each condition (readings acknowledged, refusals seen, recovery)."""


@dataclass
class Poster:
    """A node posting reading after reading (epoch second ``first + i`` for the i-th) from a thread, recording
    each answer's status (or the transport error's name)."""

    url: str
    token: str
    first: int
    answers: list[tuple[int, int | str]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        with httpx.Client(base_url=self.url, headers=headers, timeout=30) as client:
            i = 0
            while not self.stop.is_set():
                ts = self.first + i
                batch = {
                    "node": NODE,
                    "gpus": [{"uuid": UUID, "index": 0, "model": "NVIDIA H100 80GB HBM3"}],
                    "series": [{"uuid": UUID, "ts": [ts], "utilization_ratio": [0.5]}],
                }
                try:
                    response = client.post("/api/v1/ingest", json=batch)
                    if response.status_code == 503:
                        assert response.headers.get("Retry-After"), response.text
                    self.answers.append((ts, response.status_code))
                except httpx.TransportError as exc:
                    self.answers.append((ts, type(exc).__name__))
                i += 1

    def count(self, status: int) -> int:
        return sum(1 for _, answer in list(self.answers) if answer == status)


def _wait(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        assert time.monotonic() < deadline, f"not within {WAIT_SECONDS} s: {what}"
        time.sleep(0.05)


def test_readings_acknowledged_survive_a_postgres_restart_and_serve_recovers() -> None:
    with private_postgres() as cluster:
        engine = make_engine(cluster.url)
        upgrade(engine)
        with session_factory(engine).begin() as session:
            token = create_token(session, NODE, utc_now(), actor="system:test")[1]
        env = {**os.environ, "FINOPS_DATABASE_URL": cluster.url, "FINOPS_INGEST_READINGS_PER_SECOND": "1000000"}
        with serve_process(env) as url:
            poster = Poster(url, token, to_epoch(utc_now()) - 3600)
            thread = threading.Thread(target=poster.run, daemon=True)
            thread.start()
            try:
                _wait(lambda: poster.count(200) >= 50, "50 readings stored before the stop")
                cluster.stop("fast")
                _wait(lambda: poster.count(503) >= 20, "20 readings refused with 503 while PostgreSQL is down")
                health = httpx.get(f"{url}/healthz", timeout=30)
                assert health.status_code == 503 and health.headers.get("Retry-After"), health.text
                stored_before = poster.count(200)
                cluster.start()
                _wait(lambda: poster.count(200) >= stored_before + 50, "50 readings stored after the start")
                assert httpx.get(f"{url}/healthz", timeout=30).status_code == 200
                stored_before = poster.count(200)
                cluster.restart()
                _wait(lambda: poster.count(200) >= stored_before + 50, "50 readings stored after a restart")
            finally:
                poster.stop.set()
                thread.join(timeout=WAIT_SECONDS)
        statuses = {answer for _, answer in poster.answers}
        assert statuses <= {200, 503}, statuses
        acknowledged = {ts for ts, answer in poster.answers if answer == 200}
        with session_factory(engine)() as session:
            stored = set(session.scalars(select(GpuSample.ts)))
            count = session.scalar(select(func.count()).select_from(GpuSample))
        engine.dispose()
        assert {to_epoch(ts) for ts in stored} >= acknowledged
        assert count == len(stored)
