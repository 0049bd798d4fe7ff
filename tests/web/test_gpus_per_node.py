"""A node token cannot give its node more GPUs than ``FINOPS_INGEST_MAX_GPUS_PER_NODE``, over a real socket on both
databases: a new GPU at an index of the bound or above is refused by itself (named, its readings counted), the
batch's other GPUs are stored, and batch after batch the node's GPUs stay within the bound."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import orjson
from sqlalchemy import func, select

from finops.db.models import Gpu, GpuSample
from finops.ingest.limits import MAX_GPUS_PER_NODE, IngestLimits
from finops.ingest.node_tokens import create_token
from finops.web.app import create_app
from tests.support.servers import running

NOW = 1795244400  # the service's clock: 2026-11-21T07:00Z
NODE = "gpu-a-01"


def _gpu(index: int) -> dict[str, object]:
    return {"uuid": f"GPU-00000000-0000-0000-0000-{index:012d}", "index": index, "model": "NVIDIA H100 80GB HBM3"}


def _batch(indices: range, ts: int) -> bytes:
    """A batch of one reading at ``ts`` from each GPU at ``indices`` of :data:`NODE`."""
    gpus = [_gpu(index) for index in indices]
    series = [{"uuid": gpu["uuid"], "ts": [ts], "utilization_ratio": [0.5]} for gpu in gpus]
    return orjson.dumps({"node": NODE, "gpus": gpus, "series": series})


def _count(sessions, table) -> int:  # type: ignore[no-untyped-def]
    with sessions() as session:
        return int(session.scalar(select(func.count()).select_from(table)) or 0)


def test_gpus_past_the_bound_are_refused_one_by_one_and_the_rest_stored(sessions) -> None:  # type: ignore[no-untyped-def]
    with sessions.begin() as session:
        _row, token = create_token(session, NODE, datetime.now(UTC), actor="test")
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    app = create_app(sessions, None, limits=IngestLimits(), clock=lambda: NOW)
    with running(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        # Four batches of 200 GPUs each, as the node token that took a node from 2 GPUs to 1,028 sent them.
        for batch in range(4):
            start = 2 + batch * 200
            answer = client.post(
                "/api/v1/ingest", content=_batch(range(start, start + 200), NOW - 600), headers=headers
            )
            stored = max(0, min(200, MAX_GPUS_PER_NODE - start))
            assert answer.status_code == 422, answer.text
            assert answer.json()["accepted"] == stored
            rejected = answer.json()["rejected"]
            assert len(rejected) == 200 - stored
            for rejection in rejected:
                index = int(str(rejection["uuid"])[-12:])
                assert index >= MAX_GPUS_PER_NODE
                assert rejection["field"] == "gpus" and rejection["readings"] == 1
                assert rejection["error"] == (
                    f"index {index} of node {NODE} is past the {MAX_GPUS_PER_NODE} GPUs a node may have "
                    f"(FINOPS_INGEST_MAX_GPUS_PER_NODE: indices 0 to {MAX_GPUS_PER_NODE - 1}); raise it if the node "
                    "has more GPUs"
                )
        assert _count(sessions, Gpu) == MAX_GPUS_PER_NODE - 2
        # The node's real GPUs, at indices 0 and 1, and those it has, still report.
        again = client.post("/api/v1/ingest", content=_batch(range(0, MAX_GPUS_PER_NODE), NOW - 300), headers=headers)
        assert (again.status_code, again.json()) == (200, {"accepted": MAX_GPUS_PER_NODE, "rejected": []})
    assert _count(sessions, Gpu) == MAX_GPUS_PER_NODE
    assert _count(sessions, GpuSample) == 2 * (MAX_GPUS_PER_NODE - 2) + 2


def test_the_bound_is_a_setting(sessions) -> None:  # type: ignore[no-untyped-def]
    app = create_app(sessions, "shared", limits=IngestLimits(max_gpus_per_node=2), clock=lambda: NOW)
    headers = {"Authorization": "Bearer shared", "Content-Type": "application/json"}
    with running(app) as url:
        answer = httpx.post(f"{url}/api/v1/ingest", content=_batch(range(3), NOW - 600), headers=headers, timeout=30)
    assert answer.status_code == 422
    assert answer.json()["accepted"] == 2
    assert [r["uuid"] for r in answer.json()["rejected"]] == [_gpu(2)["uuid"]]
