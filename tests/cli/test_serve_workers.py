"""``serve --workers N``: several server processes on one port answer ingest and the REST API over a real socket;
with more than one, serve refuses to run the scheduled jobs itself (they run in ``gpu-finops scheduler``, once)."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import httpx
from sqlalchemy import Engine, func, select

from collector.contract import metric_names as m
from collector.contract import wire
from collector.contract.sample import Sample
from collector.shipper import INGEST_PATH, Shipper
from finops.db.models import GpuSample
from tests.support.servers import serve_process

INGEST_TOKEN = "workers-ingest-token"
API_TOKEN = "workers-api-token"
NODES = 6
"""Nodes posting, each on a connection of its own (so the kernel may hand them to either process)."""


def _body(node: str) -> bytes:
    """A gzip JSON batch of one reading of one GPU of ``node``, as the collector encodes it."""
    labels = {"gpu": "0", "uuid": f"GPU-{node}", "model": "NVIDIA H100 80GB HBM3"}
    at = datetime.now(UTC).replace(microsecond=0)
    sample = Sample("gpu", labels, {m.GPU_UTILIZATION: 0.5, m.GPU_POWER: 300.0}, at, "1")
    shipper = Shipper("http://unused", "unused", node)
    try:
        return shipper.body(wire.batch_dict([sample]))
    finally:
        shipper.close()


def test_two_workers_answer_ingest_and_the_rest_api(database_url: str, engine: Engine) -> None:
    env = {
        **os.environ, "FINOPS_DATABASE_URL": database_url, "FINOPS_INGEST_TOKEN": INGEST_TOKEN,
        "FINOPS_API_TOKEN": API_TOKEN,
    }  # fmt: skip
    ingest_headers = {"Authorization": f"Bearer {INGEST_TOKEN}", "Content-Encoding": "gzip"}
    with serve_process(env, "--workers", "2") as url:
        for n in range(NODES):
            with httpx.Client(base_url=url, timeout=30) as http:
                answer = http.post(INGEST_PATH, content=_body(f"node-{n}"), headers=ingest_headers)
                assert (answer.status_code, answer.json()) == (200, {"accepted": 1, "rejected": []})
                rest = http.get("/api/v1/budgets", headers={"Authorization": f"Bearer {API_TOKEN}"})
                assert rest.status_code == 200
    with engine.connect() as connection:
        assert connection.scalar(select(func.count()).select_from(GpuSample)) == NODES


def test_more_than_one_worker_with_the_scheduler_is_refused_before_opening_a_database(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "finops.cli", "serve", "--workers", "2"],
        capture_output=True, text=True, env={**os.environ, "FINOPS_DATA_DIR": str(tmp_path / "data")}, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: --workers above 1 needs --no-scheduler: run the scheduled jobs in `gpu-finops scheduler`"
    ]
    assert not (tmp_path / "data").exists()
