"""The ``node_io`` part of an ingest batch over a real socket: stored per node, hour and kind (mean and peak), once
however often a batch is sent, its malformed entries named without losing the readings, and batches without it (older
collectors) taken as before."""

from __future__ import annotations

import gzip

import httpx
import orjson
import pytest
from sqlalchemy import func, select

from collector.contract.node_io import MAX_NODE_IO_BYTES_PER_SECOND
from collector.shipper import Shipper
from finops.db.models import GpuSample, Node, NodeIoHour
from finops.timeutil import to_epoch
from finops.web.app import create_app
from tests.support.servers import API_TOKEN, running

TOKEN = "s3cret-token"
GPU = {"uuid": "GPU-11111111-2222-3333-4444-555555555555", "index": 0, "model": "NVIDIA H100 80GB HBM3"}
T0 = 1772445600  # 2026-03-02T10:00Z
NOW = T0 + 12 * 3600


def _batch(node_io: object = None, times: tuple[int, ...] = (T0, T0 + 10)) -> dict[str, object]:
    batch: dict[str, object] = {
        "node": "gpu-a-01",
        "gpus": [GPU],
        "series": [{"uuid": GPU["uuid"], "ts": list(times), "utilization_ratio": [0.0] * len(times)}],
    }
    if node_io is not None:
        batch["node_io"] = node_io
    return batch


def _post(url: str, body: object | bytes) -> httpx.Response:
    payload = body if isinstance(body, bytes) else orjson.dumps(body)
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip", "Authorization": f"Bearer {TOKEN}"}
    return httpx.post(f"{url}/api/v1/ingest", content=gzip.compress(payload), headers=headers)


@pytest.fixture
def service(sessions):  # type: ignore[no-untyped-def]
    with running(create_app(sessions, TOKEN, clock=lambda: NOW, api_token=API_TOKEN)) as url:
        yield url


def _hours(sessions) -> dict[tuple[int, str], tuple[int, float, float, int]]:  # type: ignore[no-untyped-def]
    """(hour, kind) → (readings, mean, peak, newest instant) of node gpu-a-01."""
    with sessions() as session:
        rows = session.execute(
            select(NodeIoHour.hour, NodeIoHour.kind, NodeIoHour.readings, NodeIoHour.rate_sum, NodeIoHour.rate_max,
                   NodeIoHour.last_ts).join(Node, Node.id == NodeIoHour.node_id).where(Node.hostname == "gpu-a-01")
        ).all()  # fmt: skip
    return {(to_epoch(h), k): (n, total / n, peak, to_epoch(last)) for h, k, n, total, peak, last in rows}


def _readings(sessions) -> int:  # type: ignore[no-untyped-def]
    with sessions() as session:
        return int(session.scalar(select(func.count()).select_from(GpuSample)))


def test_rates_are_kept_per_hour_and_kind_with_mean_and_peak_and_a_replay_adds_nothing(service, sessions) -> None:  # type: ignore[no-untyped-def]
    first = [
        {"ts": T0, "lustre_read_bytes_per_second": 2.0e9, "infiniband_received_bytes_per_second": 1.0e6},
        {"ts": T0 + 10, "lustre_read_bytes_per_second": 3.0e9, "infiniband_received_bytes_per_second": None},
    ]
    for _ in range(2):
        assert _post(service, _batch(first)).json() == {"accepted": 2, "rejected": []}
    later = [{"ts": T0 + 3600, "lustre_read_bytes_per_second": 1.0e9}]
    assert _post(service, _batch(later, (T0 + 3600,))).status_code == 200
    assert _hours(sessions) == {
        (T0, "lustre_read"): (2, 2.5e9, 3.0e9, T0 + 10),
        (T0, "infiniband_received"): (1, 1.0e6, 1.0e6, T0),
        (T0 + 3600, "lustre_read"): (1, 1.0e9, 1.0e9, T0 + 3600),
    }
    # a backlog sent again with a newer cycle: only the newer one is added
    again = [*first, {"ts": T0 + 20, "lustre_read_bytes_per_second": 4.0e9}]
    assert _post(service, _batch(again, (T0, T0 + 10, T0 + 20))).json() == {"accepted": 3, "rejected": []}
    assert _hours(sessions)[T0, "lustre_read"] == (3, 3.0e9, 4.0e9, T0 + 20)


def test_a_batch_without_node_io_is_taken_as_before(service, sessions) -> None:  # type: ignore[no-untyped-def]
    assert _post(service, _batch()).json() == {"accepted": 2, "rejected": []}
    assert _hours(sessions) == {}
    assert _readings(sessions) == 2


def test_malformed_entries_are_named_and_the_readings_and_other_entries_stored(service, sessions) -> None:  # type: ignore[no-untyped-def]
    cap = MAX_NODE_IO_BYTES_PER_SECOND
    entries = [
        f'{{"ts": {T0}, "nfs_read_bytes_per_second": 5e8}}',
        f'{{"ts": {T0 + 1}, "disk_read_bytes_per_second": -1}}',
        f'{{"ts": {T0 + 2}, "lustre_read_bytes_per_second": Infinity}}',
        f'{{"ts": {T0 + 3}, "infiniband_received_bytes_per_second": {cap * 2!r}}}',
        f'{{"ts": {T0 + 4}, "tape_read_bytes_per_second": 1}}',
        '{"ts": "2026-03-02T10:00:05Z", "nfs_read_bytes_per_second": 1}',
        f'{{"ts": {T0 + 6}, "nfs_read_bytes_per_second": "fast"}}',
        f'{{"ts": {T0 + 7}, "nfs_read_bytes_per_second": {cap!r}}}',
        f'{{"ts": {NOW + 86400}, "nfs_read_bytes_per_second": 1}}',
    ]
    body = orjson.dumps(_batch()).decode()[:-1] + ', "node_io": [' + ", ".join(entries) + "]}"
    response = _post(service, body.encode())
    assert response.status_code == 422
    answer = response.json()
    assert answer["accepted"] == 2, "the readings are not refused for a rate"
    assert sorted((r["node_io"], r["field"], r["readings"]) for r in answer["rejected"]) == [
        (1, "node_io[1].disk_read_bytes_per_second", 0),
        (2, "node_io[2].lustre_read_bytes_per_second", 0),
        (3, "node_io[3].infiniband_received_bytes_per_second", 0),
        (4, "node_io[4].tape_read_bytes_per_second", 0),
        (5, "node_io[5].ts", 0),
        (6, "node_io[6].nfs_read_bytes_per_second", 0),
        (8, "node_io[8].ts", 0),
    ]
    errors = {r["node_io"]: r["error"] for r in answer["rejected"]}
    assert "greater than or equal to 0" in errors[1]
    assert "finite" in errors[2]
    assert "less than or equal to 10000000000000" in errors[3]
    assert "in the future" in errors[8]
    assert _hours(sessions) == {(T0, "nfs_read"): (2, (5e8 + MAX_NODE_IO_BYTES_PER_SECOND) / 2, 1e13, T0 + 7)}
    assert _readings(sessions) == 2

    not_a_list = _post(service, _batch({"ts": T0}))
    assert not_a_list.status_code == 422
    assert [(r["field"], r["readings"]) for r in not_a_list.json()["rejected"]] == [("node_io", 0)]


def test_the_shipper_sends_the_node_io_part(service, sessions) -> None:  # type: ignore[no-untyped-def]
    shipper = Shipper(service, TOKEN, "gpu-a-01")
    reading = {"uuid": GPU["uuid"], "ts": "2026-03-02T10:00:00+00:00", "utilization_ratio": 0.0}
    rates = {"ts": T0, "infiniband_transmitted_bytes_per_second": 7.5e8}
    result = shipper.send({"gpus": [GPU], "samples": [reading], "node_io": [rates]})  # type: ignore[dict-item]
    shipper.close()
    assert (result.outcome, result.accepted, result.rejected) == ("delivered", 1, 0)
    assert _hours(sessions) == {(T0, "infiniband_transmitted"): (1, 7.5e8, 7.5e8, T0)}
