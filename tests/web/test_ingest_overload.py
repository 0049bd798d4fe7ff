"""Past the ingest requests a process takes under way at once, a new one is answered 503 with Retry-After at once,
nothing of it read or stored, and counted; once the requests under way are answered, ingest takes batches again.
Driven in process through httpx's ASGI transport, with bodies held mid-stream: no step waits on a time."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import httpx
import pytest
from sqlalchemy import func, select

from finops.db.models import GpuSample
from finops.ingest.limits import IngestLimits
from finops.web.app import create_app
from finops.web.ingest_route import OVERLOAD_RETRY_AFTER_SECONDS
from tests.support.ingest_in_process import held, one_reading_batch, wait_until

TOKEN = "s3cret-token"
NOW = 1795244400  # the service's clock: 2026-11-21T07:00Z
WAIT = 30.0
UNDER_WAY = 3


def _batch(node: str) -> bytes:
    return one_reading_batch(node, NOW)


@pytest.mark.anyio
async def test_past_the_requests_under_way_ingest_answers_503_with_retry_after(sessions) -> None:  # type: ignore[no-untyped-def]
    limits = IngestLimits(body_timeout_seconds=WAIT, max_requests_under_way=UNDER_WAY)
    app = create_app(sessions, TOKEN, limits=limits, clock=lambda: NOW)
    release = anyio.Event()
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    answers: dict[str, httpx.Response] = {}

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://service", timeout=WAIT) as client:

        async def post(name: str, content: bytes | AsyncIterator[bytes], token: str = TOKEN) -> None:
            sent = {**headers, "Authorization": f"Bearer {token}"}
            answers[name] = await client.post("/api/v1/ingest", content=content, headers=sent)

        async with anyio.create_task_group() as tasks:
            for n in range(UNDER_WAY):
                tasks.start_soon(post, f"held-{n}", held(_batch(f"held-{n}"), 10, release))
            await wait_until(lambda: app.state.ingest.under_way == UNDER_WAY, WAIT)
            await post("refused", _batch("refused"))
            await post("refused, no credential", _batch("refused"), token="wrong")
            refused = answers["refused"]
            assert refused.status_code == 503
            assert refused.headers["Retry-After"] == str(OVERLOAD_RETRY_AFTER_SECONDS)
            assert refused.headers["Connection"] == "close"
            assert "3 ingest requests under way" in refused.json()["detail"]
            assert answers["refused, no credential"].status_code == 503, "judged before the credential is read"
            release.set()
        assert {name: answers[name].status_code for name in answers if name.startswith("held")} == {
            f"held-{n}": 200 for n in range(UNDER_WAY)
        }
        assert app.state.ingest.under_way == 0
        await post("after", _batch("after"))
        assert answers["after"].status_code == 200, "ingest takes batches again"
    with sessions() as session:
        stored = session.scalar(select(func.count()).select_from(GpuSample))
    assert stored == 2 * (UNDER_WAY + 1), "the refused batch stored nothing"
    registry = app.state.metrics.registry
    assert registry.get_sample_value("gpufinops_ingest_refused_total", {"reason": "overload"}) == 2
    assert registry.get_sample_value("gpufinops_ingest_requests_total", {"code": "503"}) == 2
