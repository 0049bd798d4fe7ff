"""Ingest's edges over a real socket, on both databases: text PostgreSQL cannot hold, readings past what a GPU can
report, GPUs of one batch (or of batches stored together) claiming one slot or one UUID, and a backlog's ``node_io``
entries past a statement's bind parameters, a new GPU left without readings, and content codings. Each once gave a
500 (or a 503 the collector retries for ever), was stored, wrote one GPU's readings onto another, or was refused as
"Invalid JSON"; each is now refused by itself, naming the field, and the rest of the batch stored."""

from __future__ import annotations

import gzip
import json
import zlib

import httpx
import pytest
from sqlalchemy import func, select

from collector.contract.node_io import NODE_IO_COUNTERS, rate_field
from collector.contract.wire import IngestBatch
from finops.db.models import Gpu, GpuJobUtilization, GpuSample, Node, NodeIoHour
from finops.ingest.limits import IngestLimits
from finops.ingest.readings import Ingestor
from finops.web.app import create_app
from finops.web.ingest_batch import store_together
from tests.support.servers import running

TOKEN = "edges-token"
NOW = 1795244400  # the service's clock: 2026-11-21T07:00Z
TS = NOW - 3600
UUID = "GPU-11111111-2222-3333-4444-555555555555"
OTHER = "GPU-22222222-2222-3333-4444-555555555555"


@pytest.fixture
def service(sessions):  # type: ignore[no-untyped-def]
    with running(create_app(sessions, TOKEN, clock=lambda: NOW)) as url:
        yield url


def _post(url: str, body: object, query: str = "") -> httpx.Response:
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    return httpx.post(f"{url}/api/v1/ingest{query}", content=json.dumps(body), headers=headers, timeout=120)


def _gpu(uuid: str = UUID, index: int = 0, **fields: object) -> dict[str, object]:
    return {"uuid": uuid, "index": index, "model": "NVIDIA H100 80GB HBM3", **fields}


def _batch(node: str = "gpu-a-01", **parts: object) -> dict[str, object]:
    """Two GPUs of ``node``, one reading each at TS; ``parts`` replace the batch's parts."""
    series = [{"uuid": uuid, "ts": [TS], "power_watts": [300.0 + i]} for i, uuid in enumerate((UUID, OTHER))]
    return {"node": node, "gpus": [_gpu(UUID, 0), _gpu(OTHER, 1)], "series": series, **parts}


def _stored(sessions) -> list[tuple[str, str, int, float | None, str | None]]:  # type: ignore[no-untyped-def]
    """(node, GPU UUID, epoch second, power, job id) of every stored reading, in order."""
    with sessions() as session:
        rows = session.execute(
            select(Node.hostname, Gpu.uuid, GpuSample.ts, GpuSample.power_watts, GpuSample.job_id)
            .join(Gpu, Gpu.id == GpuSample.gpu_id)
            .join(Node, Node.id == Gpu.node_id)
            .order_by(Gpu.uuid, GpuSample.ts)
        ).all()
    return [(node, uuid, int(ts.timestamp()), power, job) for node, uuid, ts, power, job in rows]


NUL = "\x00"


@pytest.mark.parametrize("query", ["", "?via=fastapi"])
def test_nul_in_any_text_is_refused_naming_the_field_and_the_rest_stored(service, sessions, query) -> None:  # type: ignore[no-untyped-def]
    """PostgreSQL's text cannot hold NUL (the statement fails: a 500, the collector retrying for ever); SQLite
    stored it. Refused like any malformed value, on the lean path and FastAPI's alike: in a reading's ``job_id``
    that reading, in a series' ``uuid`` that series, in a ``job_utilization`` entry that entry; in ``node`` or a
    ``gpus`` entry the batch."""
    one_bad_job = _batch()
    one_bad_job["series"][0]["ts"] = [TS, TS + 10]  # type: ignore[index]
    one_bad_job["series"][0]["power_watts"] = [300.0, 301.0]  # type: ignore[index]
    one_bad_job["series"][0]["job_id"] = [f"7{NUL}", "8"]  # type: ignore[index]
    one_bad_job["samples"] = [{"uuid": OTHER, "ts": "2026-11-21T06:00:20Z", "job_id": f"9{NUL}"}]
    one_bad_job["job_utilization"] = [
        {"uuid": UUID, "ts": TS, "job_id": f"7{NUL}", "utilization_ratio": 0.5},
        {"uuid": UUID, "ts": TS, "job_id": "8", "utilization_ratio": 0.5},
    ]
    response = _post(service, one_bad_job, query)
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["accepted"] == 2
    fields = sorted(r["field"] for r in body["rejected"])
    assert fields == ["job_utilization[0].job_id", "samples[0].job_id", "series[0].job_id[0]"]
    assert all("NUL" in r["error"] for r in body["rejected"])
    assert _stored(sessions) == [("gpu-a-01", UUID, TS + 10, 301.0, "8"), ("gpu-a-01", OTHER, TS, 301.0, None)]
    with sessions() as session:
        assert session.scalars(select(GpuJobUtilization.job_id)).all() == ["8"]

    bad_series = _batch()
    bad_series["series"].append({"uuid": f"GPU-3{NUL}", "ts": [TS], "power_watts": [1.0]})  # type: ignore[attr-defined]
    response = _post(service, bad_series, query)
    assert response.status_code == 422, response.text
    assert [(r["field"], r["readings"]) for r in response.json()["rejected"]] == [("series[2].uuid", 1)]

    for field, batch in [
        ("node", _batch(node=f"gpu{NUL}")),
        ("gpus[0].model", _batch(gpus=[_gpu(model=f"H100{NUL}"), _gpu(OTHER, 1)])),
        ("gpus[1].uuid", _batch(gpus=[_gpu(), _gpu(f"GPU{NUL}", 1)])),
        ("gpus[0].package_id", _batch(gpus=[_gpu(package_id=f"p{NUL}", package_devices=2), _gpu(OTHER, 1)])),
    ]:
        response = _post(service, batch, query)
        assert response.status_code == 422, (field, response.text)
        assert [r["field"] for r in response.json()["rejected"]] == [field]
    assert len(_stored(sessions)) == 3


def test_two_new_gpus_at_one_index_are_both_refused_and_the_others_stored(service, sessions) -> None:  # type: ignore[no-untyped-def]
    """Two GPUs the service does not know, described at one index of a node in one batch: the second took the
    first's row (its UUID written over), both GPUs' readings went to that row and one of them was dropped as a
    duplicate, all answered 200. The slot's claimants are refused, each named; the batch's other GPU is stored."""
    third = "GPU-33333333-2222-3333-4444-555555555555"
    batch = _batch(gpus=[_gpu(UUID, 0), _gpu(OTHER, 0), _gpu(third, 1)])
    batch["series"].append({"uuid": third, "ts": [TS], "power_watts": [500.0]})  # type: ignore[attr-defined]
    response = _post(service, batch)
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["accepted"] == 1
    assert [(r["uuid"], r["field"], r["readings"]) for r in body["rejected"]] == [(UUID, "gpus", 1), (OTHER, "gpus", 1)]
    assert all("index 0 of node gpu-a-01" in r["error"] for r in body["rejected"])
    assert _stored(sessions) == [("gpu-a-01", third, TS, 500.0, None)]
    with sessions() as session:
        assert session.scalars(select(Gpu.uuid)).all() == [third]


def _round(node: str, uuid: str, index: int, power: float) -> IngestBatch:
    gpus = [_gpu(uuid, index)]
    return IngestBatch.model_validate(
        {"node": node, "gpus": gpus, "series": [{"uuid": uuid, "ts": [TS], "power_watts": [power]}]}
    )


def test_batches_stored_together_cannot_claim_one_new_gpu_or_one_new_slot(sessions) -> None:  # type: ignore[no-untyped-def]
    """Batches of concurrent requests share a transaction (:func:`store_together`), whose checks saw none of
    them stored: a new GPU that two nodes both describe was registered to the first and took the second node's
    readings too ("belongs to node" was never said); two new GPUs of one node at one index shared one row. The
    batch after the first claimant has that GPU refused, as it would be a moment later."""
    ingestor = Ingestor()
    first, second = _round("gpu-a-01", UUID, 0, 300.0), _round("gpu-b-01", UUID, 0, 900.0)
    stored = store_together(sessions, ingestor, [first, second], max_gpus_per_node=64)
    assert stored[0] == (1, {}, set())
    assert stored[1][0] == 0 and "belongs to node gpu-a-01" in stored[1][1][UUID]
    assert _stored(sessions) == [("gpu-a-01", UUID, TS, 300.0, None)]

    first, second = _round("gpu-c-01", OTHER, 0, 300.0), _round("gpu-c-01", "GPU-new", 0, 900.0)
    stored = store_together(sessions, ingestor, [first, second], max_gpus_per_node=64)
    assert stored[0] == (1, {}, set())
    assert stored[1][0] == 0 and "index 0 of node gpu-c-01 is GPU-22222222" in stored[1][1]["GPU-new"]
    assert _stored(sessions)[1:] == [("gpu-c-01", OTHER, TS, 300.0, None)]


def test_a_backlog_of_node_io_entries_is_stored_whatever_their_number(service, sessions) -> None:  # type: ignore[no-untyped-def]
    """A one-GPU node's largest backlog (10,000 cycles) carries a ``node_io`` entry per cycle: four bind parameters
    per rate made one statement past SQLite's and PostgreSQL's bounds (65,535): a 500, or a 503 the collector
    retried for ever. Folded in statements within them, the hours are those of one statement."""
    rates = {rate_field(kind): 1000.0 * (i + 1) for i, kind in enumerate(NODE_IO_COUNTERS)}
    start = NOW - 10_000 * 10
    series = [{"uuid": UUID, "ts": [start + 10 * i for i in range(10_000)], "power_watts": [300.0] * 10_000}]
    entries = [{"ts": start + 10 * i, **rates} for i in range(10_000)]
    backlog = {"node": "gpu-a-01", "gpus": [_gpu()], "series": series, "node_io": entries}
    response = _post(service, backlog)
    assert response.status_code == 200, response.text
    assert response.json() == {"accepted": 10_000, "rejected": []}
    with sessions() as session:
        hours = session.execute(
            select(NodeIoHour.hour, func.sum(NodeIoHour.readings), func.max(NodeIoHour.rate_max))
            .group_by(NodeIoHour.hour)
            .order_by(NodeIoHour.hour)
        ).all()
    assert sum(readings for _, readings, _ in hours) == 10_000 * len(NODE_IO_COUNTERS)
    assert {peak for _, _, peak in hours} == {1000.0 * len(NODE_IO_COUNTERS)}
    # Sent again (the collector missed the answer): nothing added.
    assert _post(service, backlog).status_code == 200
    with sessions() as session:
        total = session.scalar(select(func.sum(NodeIoHour.readings)))
    assert total == 10_000 * len(NODE_IO_COUNTERS)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("power_watts", 1e308),
        ("power_watts", 4_294_968.0),
        ("energy_joules", 1.7976931348623157e308),
        ("sm_clock_hertz", 1e300),
        ("temperature_celsius", 1e308),
        ("temperature_celsius", -1e308),
        ("temperature_celsius", -274.0),
    ],
)
def test_readings_no_gpu_can_report_are_refused_one_by_one(service, sessions, field, value) -> None:  # type: ignore[no-untyped-def]
    """Finite but past what any GPU reports (:data:`collector.contract.bounds.MAX_POWER_WATTS` and its kin): stored,
    they made the dashboards' sums of power overflow PostgreSQL's double precision (an error for the whole
    fleet's page). Refused like a ratio over 1, as a row or in a column, the other readings stored."""
    batch = _batch()
    batch["series"][0][field] = [value]  # type: ignore[index]
    batch["samples"] = [{"uuid": OTHER, "ts": "2026-11-21T06:00:10Z", field: value}]
    response = _post(service, batch)
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["accepted"] == 1
    assert sorted(r["field"] for r in body["rejected"]) == [f"samples[0].{field}", f"series[0].{field}[0]"]
    assert _stored(sessions) == [("gpu-a-01", OTHER, TS, 301.0, None)]


@pytest.mark.parametrize("left_out", ["none sent", "malformed", "untimely"])
def test_a_new_gpu_left_without_readings_fails_nothing_else(service, sessions, left_out) -> None:  # type: ignore[no-untyped-def]
    """A GPU the service does not know, whose series is left with no reading (an empty ``ts``, or every reading
    refused as malformed or for its time), is not registered: its rows were looked up under an id it never got, a
    500 for the whole batch (the other GPUs' readings lost, the collector retrying for ever)."""
    batch = _batch()
    first = batch["series"][0]  # type: ignore[index]
    if left_out == "none sent":
        first.update(ts=[], power_watts=[])
    elif left_out == "malformed":
        first["power_watts"] = [-1.0]
    else:
        first["ts"] = [NOW + 3600]
    response = _post(service, batch)
    assert response.status_code == (200 if left_out == "none sent" else 422), response.text
    assert response.json()["accepted"] == 1
    assert _stored(sessions) == [("gpu-a-01", OTHER, TS, 301.0, None)]
    with sessions() as session:
        assert session.scalars(select(Gpu.uuid)).all() == [OTHER]


@pytest.mark.parametrize("query", ["", "?via=fastapi"])
def test_codings_are_read_without_case_and_others_refused_naming_the_header(service, sessions, query) -> None:  # type: ignore[no-untyped-def]
    """``GZIP`` and ``x-gzip`` are gzip (RFC 9110, 8.4.1), ``identity`` none; a body of any other coding was parsed
    as JSON and refused as "Invalid JSON" (``GZIP`` too). It gets 415 naming the header, on both paths, before
    its body is read; authentication still comes first."""
    plain = json.dumps(_batch()).encode()
    for coding, body in [("GZIP", gzip.compress(plain)), ("x-gzip", gzip.compress(plain)), ("Identity", plain)]:
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Encoding": coding}
        response = httpx.post(f"{service}/api/v1/ingest{query}", content=body, headers=headers)
        assert (response.status_code, response.json()) == (200, {"accepted": 2, "rejected": []}), coding
    for coding, body in [("deflate", zlib.compress(plain)), ("br", plain), ("gzip, gzip", gzip.compress(plain))]:
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Encoding": coding}
        response = httpx.post(f"{service}/api/v1/ingest{query}", content=body, headers=headers)
        assert response.status_code == 415, (coding, response.text)
        assert "Content-Encoding" in response.json()["detail"] and response.headers["Accept-Encoding"] == "gzip"
        anonymous = {"Content-Encoding": coding}
        assert httpx.post(f"{service}/api/v1/ingest{query}", content=body, headers=anonymous).status_code == 401
    assert len(_stored(sessions)) == 2


def test_a_malformed_gpus_entry_loses_only_its_own_gpu(service, sessions) -> None:  # type: ignore[no-untyped-def]
    """One GPU's inventory entry with an over-long model name refused the whole batch, every GPU of its node lost
    cycle after cycle (collectors do not retry a 422). The entry is refused with its GPU's readings now, known GPU or
    not (what the entry says decides how they are stored: model, index, package split); the other GPU is stored."""
    batch = _batch(gpus=[_gpu(UUID, 0), _gpu(OTHER, 1, model="M" * 129)])
    response = _post(service, batch)
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["accepted"] == 1
    assert [(r["field"], r["uuid"], r["readings"]) for r in body["rejected"]] == [("gpus[1].model", OTHER, 1)]
    assert _stored(sessions) == [("gpu-a-01", UUID, TS, 300.0, None)]
    assert _post(service, _batch()).json() == {"accepted": 2, "rejected": []}  # OTHER known now
    series = [{"uuid": uuid, "ts": [TS + 10], "power_watts": [301.0]} for uuid in (UUID, OTHER)]
    response = _post(service, _batch(gpus=[{**_gpu(UUID, 0), "index": "x"}, _gpu(OTHER, 1)], series=series))
    assert response.status_code == 422, response.text
    assert response.json()["accepted"] == 1
    assert [(r["field"], r["uuid"], r["readings"]) for r in response.json()["rejected"]] == [("gpus[0].index", UUID, 1)]
    assert ("gpu-a-01", OTHER, TS + 10, 301.0, None) in _stored(sessions)
    assert ("gpu-a-01", UUID, TS + 10, 301.0, None) not in _stored(sessions)
    unreadable = _post(service, _batch(gpus=[_gpu(UUID, 0), "GPU-x"]))
    assert (unreadable.status_code, unreadable.json()["accepted"]) == (422, 0)


def test_job_utilization_and_node_io_entries_count_against_the_nodes_rate(sessions) -> None:  # type: ignore[no-untyped-def]
    """Each ``job_utilization`` and ``node_io`` entry is a row stored like a reading, but the node's token bucket
    counted readings only: one reading carried any number of entries (a 16 MiB body: about 150,000 rows) past the
    rate and the burst. They count now; a refusal still counts the batch's readings, as collectors do."""
    limits = IngestLimits(readings_per_second=10, readings_burst=100)
    shares = [{"uuid": UUID, "ts": TS, "job_id": str(job), "utilization_ratio": 0.01} for job in range(150)]
    with running(create_app(sessions, TOKEN, limits=limits, clock=lambda: NOW)) as url:
        response = _post(url, _batch(job_utilization=shares))
        assert response.status_code == 422, response.text
        assert response.json()["rejected"] == [
            {
                "field": "batch",
                "error": "the batch holds 2 readings and 150 job_utilization and node_io entries, more than a node "
                "may send at once (100, FINOPS_INGEST_READINGS_BURST): it can never pass; send smaller batches",
                "readings": 2,
            }
        ]
        entries = [{"ts": TS + i, "disk_read_bytes_per_second": 1.0} for i in range(60)]
        assert _post(url, _batch(job_utilization=shares[:30], node_io=entries)).status_code == 200  # 92 of 100
        response = _post(url, _batch(job_utilization=shares[30:40]))
        assert response.status_code == 429, response.text
        assert "2 readings and 10 job_utilization and node_io entries refused" in response.json()["detail"]
    assert len(_stored(sessions)) == 2
