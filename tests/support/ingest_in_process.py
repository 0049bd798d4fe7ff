"""Driving ``POST /api/v1/ingest`` in process through httpx's ASGI transport with bodies held mid-stream, so that a
test sees the requests under way without waiting on a time: a small valid batch, a body held after its first part,
and a wait for a condition those requests bring about."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable

import anyio
import orjson


def one_reading_batch(node: str, now: int) -> bytes:
    """The JSON body of a valid batch from ``node``: one H100 (``GPU-<node>``) with two utilisation readings (0.5)
    10 s apart, 10 minutes before ``now`` (epoch seconds, the service's clock)."""
    gpu = {"uuid": f"GPU-{node}", "index": 0, "model": "NVIDIA H100 80GB HBM3"}
    series = [{"uuid": gpu["uuid"], "ts": [now - 600, now - 590], "utilization_ratio": [0.5, 0.5]}]
    return orjson.dumps({"node": node, "gpus": [gpu], "series": series})


async def held(body: bytes, first: int, release: anyio.Event) -> AsyncIterator[bytes]:
    """``body`` streamed as a request body: its first ``first`` bytes, then the rest once ``release`` is set."""
    yield body[:first]
    await release.wait()
    yield body[first:]


async def wait_until(condition: Callable[[], bool], timeout: float) -> None:
    """Return once ``condition()`` holds, checking every 10 ms; fails the test after ``timeout`` seconds (a bound on
    a hang, not a timed assertion)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await anyio.sleep(0.01)
