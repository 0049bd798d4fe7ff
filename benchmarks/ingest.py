"""Ingest throughput: through the HTTP API versus storing the same batches directly, same run, as a ratio.

Usage: ``.venv/bin/python benchmarks/ingest.py [DATABASE_URL]`` (default: a temporary SQLite file). The
database's schema is dropped and recreated. Workload: the synthetic demo week's first day on 8 nodes (64 GPUs,
1-minute readings, 92,160 readings), shipped as one batch per node-hour, the way the demo's collectors send it.
"""

from __future__ import annotations

import gzip
import secrets
import sys
import tempfile
import threading
import time
from datetime import timedelta

import httpx
import orjson
import uvicorn

from collector import wire
from collector.sample import Sample
from collector.wire import IngestBatch
from finops.api import create_app
from finops.db import downgrade, make_engine, session_factory, upgrade
from finops.demo.activity import nominal_h100_profile
from finops.demo.allocation import derive_jobs, node_names
from finops.demo.synthetic import synthetic_week
from finops.demo.workload import Trace, idle_jobs, node_steps
from finops.ingest import Ingestor
from finops.timeutil import utc_now

NODES = 8
MINUTES = 1440
READINGS_PER_BATCH = 8 * 60  # one node's 8 GPUs over the 60 minutes node_steps yields per step


def _payloads() -> list[tuple[str, bytes]]:
    series = synthetic_week(minutes=MINUTES)
    start = utc_now().replace(second=0, microsecond=0) - timedelta(minutes=MINUTES)
    trace = Trace(derive_jobs(series), node_names(series), start, MINUTES)
    idle = idle_jobs(trace.jobs)
    payloads = []
    for node in trace.nodes[:NODES]:
        for step in node_steps(trace, node, nominal_h100_profile(), idle):
            payloads.append((node, gzip.compress(orjson.dumps(_body(node, step)), compresslevel=1)))
    return payloads


def _body(node: str, step: list[Sample]) -> dict[str, object]:
    inventory = {s.labels["uuid"]: wire.gpu_info_dict(s) for s in step}
    return {"node": node, "gpus": list(inventory.values()), "samples": [wire.reading_dict(s) for s in step]}


def _fresh(url: str) -> None:
    engine = make_engine(url)
    downgrade(engine, "base")
    upgrade(engine)
    engine.dispose()


def direct(url: str, payloads: list[tuple[str, bytes]]) -> float:
    """Readings/s storing the batches in-process (decompress, validate, store): the baseline."""
    _fresh(url)
    sessions, ingestor = session_factory(make_engine(url)), Ingestor()
    began = time.perf_counter()
    for _, payload in payloads:
        batch = IngestBatch.model_validate_json(gzip.decompress(payload))
        with sessions.begin() as session:
            ingestor.store(session, batch)
    return READINGS_PER_BATCH * len(payloads) / (time.perf_counter() - began)


def over_http(url: str, payloads: list[tuple[str, bytes]]) -> float:
    """Readings/s POSTing the same batches to the API on 127.0.0.1 (uvicorn in this process)."""
    _fresh(url)
    token = secrets.token_urlsafe()
    server = uvicorn.Server(uvicorn.Config(create_app(session_factory(make_engine(url)), token), port=0,
                                           log_level="warning"))  # fmt: skip
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    headers = {"Authorization": f"Bearer {token}", "Content-Encoding": "gzip", "Content-Type": "application/json"}
    began = time.perf_counter()
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=60) as client:
        for _, payload in payloads:
            client.post("/api/v1/ingest", content=payload).raise_for_status()
    rate = READINGS_PER_BATCH * len(payloads) / (time.perf_counter() - began)
    server.should_exit = True
    thread.join()
    return rate


def main() -> None:
    url = sys.argv[1] if len(sys.argv) > 1 else f"sqlite:///{tempfile.mkdtemp()}/bench.sqlite"
    payloads = _payloads()
    baseline, http = direct(url, payloads), over_http(url, payloads)
    readings = READINGS_PER_BATCH * len(payloads)
    print(f"database: {make_engine(url).dialect.name}, {readings:,} readings in {len(payloads)} batches")
    print(f"direct store (baseline): {baseline:,.0f} readings/s")
    print(f"HTTP ingest:             {http:,.0f} readings/s  ({http / baseline:.2f} x baseline)")


if __name__ == "__main__":
    main()
