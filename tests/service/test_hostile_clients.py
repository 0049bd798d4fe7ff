"""``gpu-finops serve`` as a child process under hostile clients over real sockets: hundreds of 4 MiB bodies
without a credential (its memory, read from ``/proc/<pid>/status``, stays bounded), the same with an admin credential
(bounded by the body memory budget: ``503`` with ``Retry-After``), one node token's slow senders (another node's
batch is answered while they are still open), and a price catalogue nested 100,000 deep (``422`` naming the bound).
Every wait is bounded; no assertion is on a time."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import orjson
import pytest

from finops.db.engine import make_engine, session_factory, upgrade
from finops.ingest.limits import REQUESTS_PER_NODE
from finops.ingest.node_tokens import create_token
from finops.web.app import REST_MAX_BODY_BYTES
from tests.support.servers import serve_child
from tests.support.slow_sender import SlowSender

API_TOKEN = "hostile-clients-admin-token"
BUDGET = 64 * 2**20
"""``FINOPS_BODY_MEMORY_BUDGET_BYTES`` of the service (its default)."""
CONNECTIONS = 500
BODY = b"#" * REST_MAX_BODY_BYTES
"""A body of the largest size the REST API takes (a YAML comment: a catalogue refused, if it were read)."""
UNAUTHENTICATED_GROWTH = 128 * 2**20
"""Most the service's resident memory may grow under :data:`CONNECTIONS` bodies without a credential: about
uvicorn's buffer per connection (64 KiB) at once and the interpreter's own; 500 bodies held would be 2 GiB."""
AUTHENTICATED_GROWTH = 4 * BUDGET
"""Most it may grow under as many bodies with an admin credential: the budget's bodies, each with its copies
(the body, its text, the parsed YAML)."""
WAIT = 120.0
"""Bound of every wait (a flood over loopback on a busy machine)."""


@dataclass
class Service:
    url: str
    pid: int
    node_tokens: dict[str, str]


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    """``serve`` on an SQLite file with an admin token, node tokens for gpu-a and gpu-b, and a body deadline long
    enough that slow senders are still open when the test looks."""
    url = f"sqlite:///{tmp_path / 'finops.sqlite'}"
    engine = make_engine(url)
    upgrade(engine)
    with session_factory(engine).begin() as session:
        tokens = {node: create_token(session, node, datetime.now(UTC), actor="test")[1] for node in ("gpu-a", "gpu-b")}
    engine.dispose()
    env = {
        **os.environ, "FINOPS_DATABASE_URL": url, "FINOPS_API_TOKEN": API_TOKEN,
        "FINOPS_INGEST_BODY_TIMEOUT_SECONDS": str(WAIT), "FINOPS_BODY_MEMORY_BUDGET_BYTES": str(BUDGET),
    }  # fmt: skip
    with serve_child(env) as (base, process):
        yield Service(base, process.pid, tokens)


def _status_kib(pid: int, field: str) -> int:
    """``field`` (``VmRSS``: resident now, ``VmHWM``: its peak) of ``/proc/<pid>/status``, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


async def _put(url: str, headers: str, polite: bool) -> str:
    """PUT :data:`BODY` to ``/api/v1/prices`` on a connection of its own; the response's status code, or what ended
    the exchange. A hostile client sends its body at once (the service may close the connection before taking it
    all: a reset); a ``polite`` one sends ``Expect: 100-continue`` and its body only once the service asks for it
    (RFC 9110 section 10.1.1), so that it reads any answer given before."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    expect = "Expect: 100-continue\r\n" if polite else ""
    head = f"PUT /api/v1/prices HTTP/1.1\r\nHost: {host}\r\n{headers}{expect}Content-Length: {len(BODY)}\r\n\r\n"
    try:
        writer.write(head.encode() if polite else head.encode() + BODY)
        with contextlib.suppress(ConnectionError):  # refused before the body was sent: the answer may still be read
            await writer.drain()
        status = (await reader.readline()).decode().split(" ")
        if polite and status[1:2] == ["100"]:
            await reader.readline()  # the empty line ending the interim response
            writer.write(BODY)
            await writer.drain()
            status = (await reader.readline()).decode().split(" ")
        return status[1] if len(status) > 1 else "closed"
    except ConnectionError as exc:
        return type(exc).__name__
    finally:
        writer.close()


async def _flood(url: str, headers: str, polite: bool = False) -> Counter[str]:
    """:data:`CONNECTIONS` PUTs at once (:func:`_put`); how many ended each way."""
    puts = (_put(url, headers, polite) for _ in range(CONNECTIONS))
    return Counter(await asyncio.wait_for(asyncio.gather(*puts), WAIT))


def test_bodies_without_a_credential_are_not_read_and_with_one_stay_within_the_budget(service: Service) -> None:
    with httpx.Client(timeout=WAIT) as client:  # the routes' first use out of the way
        assert client.get(f"{service.url}/api/v1/prices", headers={"Authorization": f"Bearer {API_TOKEN}"}).is_success
    before = _status_kib(service.pid, "VmRSS")
    unauthenticated = asyncio.run(_flood(service.url, ""))
    peak = _status_kib(service.pid, "VmHWM")
    print(
        f"RSS before {before} KiB; peak under {CONNECTIONS} unauthenticated 4 MiB bodies {peak} KiB; {unauthenticated}"
    )
    # Each is answered 401 and its connection closed with the body unread: the client reads the 401, or, still
    # sending, sees the reset first (on a loaded machine, every one of them may). The service answers 401 after it.
    assert set(unauthenticated) <= {"401", "ConnectionResetError", "BrokenPipeError"}, unauthenticated
    assert (peak - before) * 1024 < UNAUTHENTICATED_GROWTH

    authenticated = asyncio.run(_flood(service.url, f"Authorization: Bearer {API_TOKEN}\r\n", polite=True))
    grown = _status_kib(service.pid, "VmHWM")
    print(f"peak under {CONNECTIONS} admin 4 MiB bodies {grown} KiB; {authenticated}")
    assert authenticated["422"] >= 1, "the bodies the budget takes are read (an empty catalogue: 422)"
    assert authenticated["503"] >= 1, "the rest are refused while the budget is taken"
    assert set(authenticated) == {"422", "503"}
    assert (grown - before) * 1024 < AUTHENTICATED_GROWTH
    with httpx.Client(timeout=WAIT) as client:
        refused = client.put(f"{service.url}/api/v1/prices", content=b"currency: USD\n")
        assert refused.status_code == 401
        assert client.get(f"{service.url}/healthz").status_code == 200


def _batch(node: str) -> bytes:
    now = int(datetime.now(UTC).timestamp())
    gpu = {"uuid": f"GPU-{node}", "index": 0, "model": "NVIDIA H100 80GB HBM3"}
    series = [{"uuid": gpu["uuid"], "ts": [now - 60], "utilization_ratio": [0.5]}]
    return orjson.dumps({"node": node, "gpus": [gpu], "series": series})


def test_one_nodes_slow_senders_never_hold_another_nodes_batch(service: Service) -> None:
    ingest = "/api/v1/ingest"
    slow = [SlowSender(service.url, ingest, service.node_tokens["gpu-a"], wait=WAIT) for _ in range(16)]
    try:
        refused = [sender for sender in slow if sender.answered()]
        deadline = threading.Event()
        timer = threading.Timer(WAIT, deadline.set)
        timer.start()
        while len(refused) < len(slow) - REQUESTS_PER_NODE and not deadline.wait(0.05):
            refused = [sender for sender in slow if sender.answered()]
        timer.cancel()
        assert len(refused) == len(slow) - REQUESTS_PER_NODE, "a node's requests beyond its slots are answered at once"
        for sender in refused:
            data, _took, _closed = sender.answer()
            assert data.startswith(b"HTTP/1.1 429 "), data[:200]
            assert b"retry-after: 5" in data.lower()
        headers = {"Authorization": f"Bearer {service.node_tokens['gpu-b']}", "Content-Type": "application/json"}
        stored = httpx.post(f"{service.url}{ingest}", content=_batch("gpu-b"), headers=headers, timeout=WAIT)
        assert (stored.status_code, stored.json()) == (200, {"accepted": 1, "rejected": []})
        held = [sender for sender in slow if sender not in refused]
        assert not any(sender.answered() for sender in held), "gpu-b was answered while gpu-a's slow senders are open"
    finally:
        for sender in slow:
            sender.close()


def test_a_deeply_nested_catalogue_is_refused_with_422(service: Service) -> None:
    headers = {"Authorization": f"Bearer {API_TOKEN}"}
    deep = "models: " + "[" * 100_000 + "]" * 100_000 + "\n"  # a RecursionError (500) with PyYAML's Python composer
    response = httpx.put(f"{service.url}/api/v1/prices", content=deep, headers=headers, timeout=WAIT)
    assert response.status_code == 422
    assert response.json()["detail"] == (
        "price catalog PUT /api/v1/prices: invalid YAML at line 1: exceeded maximum nesting depth"
    )
