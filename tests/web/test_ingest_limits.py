"""What ingest refuses of an authenticated node beyond the format, over a real socket: readings stamped outside the
time window (:class:`finops.ingest.limits.TimeWindow`)."""

from __future__ import annotations

import gzip

import httpx
import orjson
import pytest
from sqlalchemy import func, select

from finops.db.models import Gpu, GpuJobUtilization, GpuSample
from finops.ingest.limits import FUTURE_GRACE_SECONDS, IngestLimits
from finops.web.app import create_app
from tests.support.servers import running

TOKEN = "s3cret-token"
NOW = 1795244400  # the service's clock in these tests: 2026-11-21T07:00Z
DAY = 86400
GPU = {"uuid": "GPU-11111111-2222-3333-4444-555555555555", "index": 0, "model": "NVIDIA H100 80GB HBM3"}


def _post(url: str, body: object) -> httpx.Response:
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Encoding": "gzip"}
    return httpx.post(f"{url}/api/v1/ingest", content=gzip.compress(orjson.dumps(body)), headers=headers)


@pytest.fixture
def service(sessions):  # type: ignore[no-untyped-def]
    with running(create_app(sessions, TOKEN, limits=IngestLimits(retention_days=35), clock=lambda: NOW)) as url:
        yield url


def _stored(sessions) -> list[int]:  # type: ignore[no-untyped-def]
    with sessions() as session:
        return sorted(int(ts.timestamp()) for ts in session.scalars(select(GpuSample.ts)))


def test_readings_outside_the_window_are_refused_one_by_one_and_the_rest_stored(service, sessions) -> None:  # type: ignore[no-untyped-def]
    earliest = (NOW // DAY - 35) * DAY  # the retention cutoff: the UTC midnight 35 whole days before today's
    first = NOW - 600
    series_ts = [0, first, earliest - 1, earliest, NOW + FUTURE_GRACE_SECONDS, NOW + FUTURE_GRACE_SECONDS + 1]
    batch = {
        "node": "gpu-a-01",
        "gpus": [GPU],
        "series": [{"uuid": GPU["uuid"], "ts": series_ts, "utilization_ratio": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]}],
        "samples": [
            {"uuid": GPU["uuid"], "ts": "1970-01-01T00:00:00Z", "utilization_ratio": 0.5},
            {"uuid": GPU["uuid"], "ts": "2026-11-21T07:05:00Z", "utilization_ratio": 0.5},
            {"uuid": GPU["uuid"], "ts": "2036-11-21T07:05:00Z", "utilization_ratio": 0.5},
        ],
        "job_utilization": [
            {"uuid": GPU["uuid"], "ts": first, "job_id": "1", "utilization_ratio": 0.5},
            {"uuid": GPU["uuid"], "ts": 0, "job_id": "1", "utilization_ratio": 0.5},
        ],
    }
    response = _post(service, batch)
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["accepted"] == 4
    assert [(r.get("series"), r.get("index"), r.get("job_utilization"), r["field"]) for r in body["rejected"]] == [
        (0, 0, None, "series[0].ts[0]"),
        (0, 2, None, "series[0].ts[2]"),
        (0, 5, None, "series[0].ts[5]"),
        (None, 0, None, "samples[0].ts"),
        (None, 2, None, "samples[2].ts"),
        (None, None, 1, "job_utilization[1].ts"),
    ]
    reasons = [r["error"] for r in body["rejected"]]
    assert "older than the sample retention" in reasons[0] and "in the future" in reasons[2]
    assert _stored(sessions) == sorted([first, earliest, NOW + FUTURE_GRACE_SECONDS, NOW + 300])
    with sessions() as session:
        gpu = session.scalars(select(Gpu)).one()
        shares = session.scalar(select(func.count()).select_from(GpuJobUtilization))
    # The ts=0 readings touched nothing: the GPU entered service at its earliest accepted reading.
    assert int(gpu.in_service_from.timestamp()) == earliest
    assert shares == 1


def test_a_reading_at_ts_0_leaves_a_known_gpu_alone(service, sessions) -> None:  # type: ignore[no-untyped-def]
    ok = {"node": "gpu-a-01", "gpus": [GPU], "series": [{"uuid": GPU["uuid"], "ts": [NOW], "power_watts": [300.0]}]}
    assert _post(service, ok).status_code == 200
    forged = {**ok, "series": [{"uuid": GPU["uuid"], "ts": [0], "power_watts": [300.0]}]}
    response = _post(service, forged)
    assert response.status_code == 422
    assert response.json()["accepted"] == 0
    assert [r["field"] for r in response.json()["rejected"]] == ["series[0].ts[0]"]
    with sessions() as session:
        assert int(session.scalars(select(Gpu)).one().in_service_from.timestamp()) == NOW
    assert _stored(sessions) == [NOW]


def test_places_are_those_sent_when_malformed_entries_were_left_out_first(service, sessions) -> None:  # type: ignore[no-untyped-def]
    batch = {
        "node": "gpu-a-01",
        "gpus": [GPU],
        "series": [
            {"uuid": "", "ts": [NOW]},  # refused whole: a bad uuid
            {"uuid": GPU["uuid"], "ts": [NOW, NOW + 1, 0], "utilization_ratio": [7.0, 0.5, 0.5]},
        ],
        "samples": [
            {"uuid": GPU["uuid"], "ts": "2026-11-21T07:00:00", "utilization_ratio": 0.5},  # no UTC offset
            {"uuid": GPU["uuid"], "ts": "1970-01-01T00:00:00Z", "utilization_ratio": 0.5},
        ],
    }
    response = _post(service, batch)
    assert response.status_code == 422
    fields = sorted(r["field"] for r in response.json()["rejected"])
    assert fields == [
        "samples[0].ts",
        "samples[1].ts",
        "series[0].uuid",
        "series[1].ts[2]",
        "series[1].utilization_ratio[0]",
    ]
    assert _stored(sessions) == [NOW + 1]


def _one(node: str, gpu: dict[str, object], ts: int = NOW) -> dict[str, object]:
    return {"node": node, "gpus": [gpu], "series": [{"uuid": gpu["uuid"], "ts": [ts], "power_watts": [300.0]}]}


def _gpus(sessions) -> list[tuple[str, int, str | None, str]]:  # type: ignore[no-untyped-def]
    from finops.db.models import Node

    with sessions() as session:
        rows = session.execute(select(Node.hostname, Gpu.gpu_index, Gpu.uuid, Gpu.model).join(Node)).all()
    return sorted((h, i, u, m) for h, i, u, m in rows)


def test_another_nodes_gpu_cannot_be_written_nor_its_slot_re_registered(service, sessions) -> None:  # type: ignore[no-untyped-def]
    assert _post(service, _one("gpu-a-01", GPU)).status_code == 200
    # Node b names a's GPU: refused with whose it is, a's later readings still stored.
    stolen = _post(service, _one("gpu-b-01", GPU, NOW + 10))
    assert stolen.status_code == 422
    assert stolen.json()["rejected"] == [
        {"uuid": GPU["uuid"], "field": "gpus", "error": f"{GPU['uuid']} belongs to node gpu-a-01", "readings": 1}
    ]
    assert _post(service, _one("gpu-a-01", GPU, NOW + 20)).status_code == 200
    # A batch of a re-registering index 0 with a new UUID and model: refused, pointing at the command.
    b200 = {"uuid": "GPU-bbbbbbbb-0000-0000-0000-000000000000", "index": 0, "model": "NVIDIA B200"}
    swapped = _post(service, _one("gpu-a-01", b200, NOW + 30))
    assert swapped.status_code == 422
    assert "gpu-finops nodes gpu replace gpu-a-01 0" in swapped.json()["rejected"][0]["error"]
    # The same UUID announced as another model: refused too.
    relabelled = _post(service, _one("gpu-a-01", {**GPU, "model": "NVIDIA B200"}, NOW + 40))
    assert relabelled.status_code == 422 and "is registered as NVIDIA H100" in relabelled.json()["rejected"][0]["error"]
    assert _gpus(sessions) == [("gpu-a-01", 0, GPU["uuid"], GPU["model"])]
    assert _stored(sessions) == [NOW, NOW + 20]


def test_the_operator_frees_a_slot_for_a_swapped_board(service, sessions, engine, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from typer.testing import CliRunner

    from finops.cli import app

    assert _post(service, _one("gpu-a-01", GPU)).status_code == 200
    b200 = {"uuid": "GPU-bbbbbbbb-0000-0000-0000-000000000000", "index": 0, "model": "NVIDIA B200"}
    monkeypatch.setenv("FINOPS_DATABASE_URL", engine.url.render_as_string(hide_password=False))
    result = CliRunner().invoke(app, ["nodes", "gpu", "replace", "gpu-a-01", "0"])
    assert result.exit_code == 0, result.output
    assert f"{GPU['uuid']} released" in result.output
    assert _post(service, _one("gpu-a-01", b200, NOW + 10)).status_code == 200
    assert _gpus(sessions) == [("gpu-a-01", 0, b200["uuid"], "NVIDIA B200")]
    missing = CliRunner().invoke(app, ["nodes", "gpu", "replace", "gpu-a-01", "7"])
    assert missing.exit_code != 0 and "has no GPU 7" in missing.output


def test_a_replaced_gpus_uuid_is_forgotten_by_the_running_service(service, sessions, database_url: str) -> None:  # type: ignore[no-untyped-def]
    from typer.testing import CliRunner

    from finops.cli import app

    assert _post(service, _one("gpu-a-01", GPU)).status_code == 200  # the service caches the UUID's GPU row
    replaced = CliRunner().invoke(
        app, ["nodes", "gpu", "replace", "gpu-a-01", "0"], env={"FINOPS_DATABASE_URL": database_url}
    )
    assert replaced.exit_code == 0, replaced.output
    # The board went to node b: its readings are b's, not those of the slot of a it left.
    assert _post(service, _one("gpu-b-01", GPU, NOW + 10)).status_code == 200
    assert _gpus(sessions) == [("gpu-a-01", 0, None, GPU["model"]), ("gpu-b-01", 0, GPU["uuid"], GPU["model"])]
    from finops.db.models import Node

    with sessions() as session:
        rows = session.execute(select(Node.hostname, GpuSample.ts).join(Gpu, Gpu.id == GpuSample.gpu_id).join(Node))
        assert sorted((host, int(ts.timestamp())) for host, ts in rows) == [("gpu-a-01", NOW), ("gpu-b-01", NOW + 10)]
