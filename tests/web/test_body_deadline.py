"""Request bodies are read under a deadline, over a real socket: a sender trickling its body one byte a second gets
``408`` and its connection closed, while other requests are served meanwhile. Every wait is bounded."""

from __future__ import annotations

import gzip
import socket

import httpx
import orjson
import pytest

from finops.ingest.limits import IngestLimits
from finops.web.app import create_app
from finops.web.ingest_route import INGEST_CONCURRENCY
from tests.support.servers import API_TOKEN, running, service_metrics
from tests.support.slow_sender import SlowSender

TOKEN = "s3cret-token"
NOW = 1795244400  # the service's clock: 2026-11-21T07:00Z
DEADLINE = 1.0
WAIT = 15.0  # the longest any step may take: far above the deadline, bounded


def _batch(readings: int = 3) -> bytes:
    gpu = {"uuid": "GPU-11111111-2222-3333-4444-555555555555", "index": 0, "model": "NVIDIA H100 80GB HBM3"}
    ts = list(range(NOW - 600, NOW - 600 + readings))
    series = [{"uuid": gpu["uuid"], "ts": ts, "utilization_ratio": [0.5] * readings}]
    return gzip.compress(orjson.dumps({"node": "gpu-a-01", "gpus": [gpu], "series": series}))


@pytest.fixture
def service(sessions):  # type: ignore[no-untyped-def]
    limits = IngestLimits(body_timeout_seconds=DEADLINE)
    with running(create_app(sessions, TOKEN, limits=limits, clock=lambda: NOW, api_token=API_TOKEN)) as url:
        yield url


def test_slow_ingest_bodies_get_408_and_their_connection_closed_while_others_are_served(service) -> None:  # type: ignore[no-untyped-def]
    # More slow senders than ingest slots: without the deadline they would hold every slot for as long as they like.
    slow = [SlowSender(service, "/api/v1/ingest", TOKEN, wait=WAIT) for _ in range(INGEST_CONCURRENCY + 1)]
    with httpx.Client(timeout=WAIT) as client:
        assert client.get(f"{service}/healthz").status_code == 200
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Encoding": "gzip"}
        stored = client.post(f"{service}/api/v1/ingest", content=_batch(), headers=headers)
        assert stored.status_code == 200, stored.text
        assert stored.json() == {"accepted": 3, "rejected": []}
    for sender in slow:
        data, took, closed = sender.answer()
        assert data.startswith(b"HTTP/1.1 408 "), data[:200]
        assert b"connection: close" in data.lower()
        assert b"request body not received within 1 s" in data
        assert closed, "the service kept the connection open"
        assert DEADLINE <= took < WAIT
    metrics = service_metrics(service, timeout=WAIT)
    assert f'gpufinops_ingest_requests_total{{code="408"}} {float(len(slow))}' in metrics


def test_slow_bodies_of_other_requests_get_408_too(service) -> None:  # type: ignore[no-untyped-def]
    sender = SlowSender(service, "/api/v1/prices", API_TOKEN, wait=WAIT)
    assert httpx.get(f"{service}/healthz", timeout=WAIT).status_code == 200
    data, took, closed = sender.answer()
    assert data.startswith(b"HTTP/1.1 408 "), data[:200]
    assert closed and DEADLINE <= took < WAIT


def test_a_body_sent_in_time_in_pieces_is_read_whole(service) -> None:  # type: ignore[no-untyped-def]
    body = _batch()
    host, port = service.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=WAIT) as sock:
        head = (
            f"POST /api/v1/ingest HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}\r\n"
            f"Content-Encoding: gzip\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        sock.sendall(head.encode())
        for start in range(0, len(body), 16):
            sock.sendall(body[start : start + 16])
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 200 "), data[:300]
