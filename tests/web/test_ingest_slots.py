"""Ingest bodies larger than SMALL_BODY_BYTES take one of LARGE_INGEST_CONCURRENCY slots while they are read and
stored, so that however many arrive, ingest holds about that many large bodies in memory; small bodies pass beside
them. Driven in process through httpx's ASGI transport, whose request bodies stream chunk by chunk, and observed
on the slots' limiter: no step waits on a time."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import httpx
import orjson
import pytest

from finops.ingest.limits import IngestLimits
from finops.web.app import create_app
from finops.web.ingest_route import LARGE_INGEST_CONCURRENCY, SMALL_BODY_BYTES
from tests.support.ingest_in_process import held, one_reading_batch, wait_until

TOKEN = "s3cret-token"
NOW = 1795244400  # the service's clock: 2026-11-21T07:00Z
WAIT = 30.0


def _batch(node: str) -> bytes:
    """A valid batch padded past SMALL_BODY_BYTES with leading JSON whitespace."""
    return b" " * (SMALL_BODY_BYTES + 1) + one_reading_batch(node, NOW)


@pytest.mark.anyio
async def test_large_bodies_wait_for_a_large_slot_and_small_ones_do_not(sessions) -> None:  # type: ignore[no-untyped-def]
    app = create_app(sessions, TOKEN, limits=IngestLimits(body_timeout_seconds=WAIT), clock=lambda: NOW)
    slots: anyio.CapacityLimiter = app.state.ingest.large_slots
    release = anyio.Event()
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    answers: dict[str, int] = {}

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://service", timeout=WAIT) as client:

        async def post(name: str, content: bytes | AsyncIterator[bytes]) -> None:
            response = await client.post("/api/v1/ingest", content=content, headers=headers)
            answers[name] = response.status_code

        async with anyio.create_task_group() as tasks:
            for n in range(LARGE_INGEST_CONCURRENCY):
                first = SMALL_BODY_BYTES + 1  # past the small size: takes a large slot
                tasks.start_soon(post, f"held-{n}", held(_batch(f"held-{n}"), first, release))
            await wait_until(lambda: slots.borrowed_tokens == LARGE_INGEST_CONCURRENCY, WAIT)
            tasks.start_soon(post, "large", _batch("large"))
            await wait_until(lambda: slots.statistics().tasks_waiting == 1, WAIT)
            small = orjson.dumps(orjson.loads(_batch("small")))
            await post("small", small)
            assert answers == {"small": 200}, "a small body is stored while every large slot is held"
            release.set()
        assert answers == {**{f"held-{n}": 200 for n in range(LARGE_INGEST_CONCURRENCY)}, "large": 200, "small": 200}
        assert slots.borrowed_tokens == 0
