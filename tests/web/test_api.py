"""The ingest API over a real socket: authentication, idempotence, partial acceptance, metrics."""

from __future__ import annotations

import gzip
from concurrent.futures import ThreadPoolExecutor

import httpx
import orjson
import pytest
from sqlalchemy import func, select

from collector.shipper import Shipper
from finops.db.ledger_tables import DirtyHour
from finops.db.models import Gpu, GpuSample
from finops.web.app import create_app
from tests.support.servers import API_TOKEN, running, service_metrics

TOKEN = "s3cret-token"
GPU = {"uuid": "GPU-11111111-2222-3333-4444-555555555555", "index": 0, "model": "NVIDIA H100 80GB HBM3"}
NOW = 1772445600 + 12 * 3600
"""The service's clock in these tests (2026-03-02T22:00Z, the day of their readings): readings are judged against it
(:class:`finops.ingest.limits.TimeWindow`)."""


def _clock() -> float:
    return NOW


def _batch(n: int = 3) -> dict[str, object]:
    return {
        "node": "gpu-a-01",
        "gpus": [GPU],
        "samples": [
            {"uuid": GPU["uuid"], "ts": f"2026-03-02T10:0{i}:00Z", "utilization_ratio": 0.25 * i, "power_watts": 300.0}
            for i in range(n)
        ],
    }


def _post(url: str, body: object, token: str | None = TOKEN, gzipped: bool = True) -> httpx.Response:
    payload = orjson.dumps(body)
    headers = {"Content-Type": "application/json"}
    if gzipped:
        payload, headers["Content-Encoding"] = gzip.compress(payload), "gzip"
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.post(f"{url}/api/v1/ingest", content=payload, headers=headers)


@pytest.fixture
def service(sessions):  # type: ignore[no-untyped-def]
    with running(create_app(sessions, TOKEN, clock=_clock, api_token=API_TOKEN)) as url:
        yield url


def _count(sessions) -> int:  # type: ignore[no-untyped-def]
    with sessions() as session:
        return int(session.scalar(select(func.count()).select_from(GpuSample)))


def test_ingest_requires_the_bearer_token(service: str, sessions) -> None:  # type: ignore[no-untyped-def]
    assert _post(service, _batch(), token=None).status_code == 401
    assert _post(service, _batch(), token="wrong").status_code == 401
    assert _count(sessions) == 0


def test_replayed_batch_adds_no_rows(service: str, sessions) -> None:  # type: ignore[no-untyped-def]
    first = _post(service, _batch())
    assert first.status_code == 200 and first.json() == {"accepted": 3, "rejected": []}
    assert _post(service, _batch(), gzipped=False).status_code == 200
    assert _count(sessions) == 3
    with sessions() as session:
        gpu = session.scalars(select(Gpu)).one()
    assert (gpu.uuid, gpu.gpu_index, gpu.model) == (GPU["uuid"], 0, GPU["model"])
    assert gpu.in_service_from.isoformat() == "2026-03-02T10:00:00+00:00"


def test_malformed_sample_is_named_and_the_rest_stored(service: str, sessions) -> None:  # type: ignore[no-untyped-def]
    batch = _batch(3)
    batch["samples"][1]["utilization_ratio"] = 7.5  # type: ignore[index]
    batch["samples"][2]["ts"] = "2026-03-02T10:02:00"  # type: ignore[index]  # no UTC offset
    response = _post(service, batch)
    assert response.status_code == 422
    body = response.json()
    assert body["accepted"] == 1
    assert {(r["index"], r["field"]) for r in body["rejected"]} == {
        (1, "samples[1].utilization_ratio"),
        (2, "samples[2].ts"),
    }
    assert _count(sessions) == 1


def test_batch_level_error_stores_nothing(service: str, sessions) -> None:  # type: ignore[no-untyped-def]
    batch = _batch()
    del batch["node"]
    response = _post(service, batch)
    assert response.status_code == 422
    assert response.json()["rejected"][0]["field"] == "node"
    assert _count(sessions) == 0


def test_metrics_count_stored_and_rejected_readings(service: str) -> None:
    batch = _batch(2)
    batch["samples"][0]["power_watts"] = -1  # type: ignore[index]
    _post(service, batch)
    text = service_metrics(service)
    assert "gpufinops_ingest_samples_total 1.0" in text
    assert "gpufinops_ingest_rejected_samples_total 1.0" in text
    assert httpx.get(f"{service}/healthz").json() == {"status": "ok"}


def _series_batch() -> dict[str, object]:
    """Two GPUs as columns, three readings each (2026-03-02T10:00Z and 10 s, 20 s later)."""
    other = {**GPU, "uuid": "GPU-99999999-2222-3333-4444-555555555555", "index": 1}
    t0 = 1772445600
    return {
        "node": "gpu-a-01",
        "gpus": [GPU, other],
        "series": [
            {
                "uuid": gpu["uuid"],
                "ts": [t0, t0 + 10, t0 + 20],
                "utilization_ratio": [0.5, 0.25, None],
                "memory_used_bytes": [2**36, 2**36, 0],
                "power_watts": [650.5, 640.0, 100.0],
                "clocks_event_reasons": [0, 4, 4],
                "job_id": ["4000123", "4000123", None],
            }
            for gpu in (GPU, other)
        ],
    }


def test_columns_are_stored_as_rows(service: str, sessions) -> None:  # type: ignore[no-untyped-def]
    response = _post(service, _series_batch())
    assert response.status_code == 200 and response.json() == {"accepted": 6, "rejected": []}
    assert _post(service, _series_batch()).json() == {"accepted": 6, "rejected": []}, "a replay is taken"
    assert _count(sessions) == 6
    with sessions() as session:
        row = session.execute(
            select(GpuSample).join(Gpu).where(Gpu.gpu_index == 1).order_by(GpuSample.ts.desc()).limit(1)
        ).scalar_one()
        dirty = session.scalars(select(DirtyHour.hour)).all()
    assert row.ts.isoformat() == "2026-03-02T10:00:20+00:00"
    assert (row.utilization_ratio, row.memory_used_bytes, row.power_watts, row.clocks_event_reasons, row.job_id) == (
        None, 0, 100.0, 4, None,
    )  # fmt: skip
    assert (row.energy_joules, row.temperature_celsius) == (None, None), "a column left out is null"
    assert [hour.isoformat() for hour in dirty] == ["2026-03-02T10:00:00+00:00"]


def test_rows_and_columns_in_one_batch(service: str, sessions) -> None:  # type: ignore[no-untyped-def]
    batch = {**_series_batch(), "samples": _batch(2)["samples"]}  # GPU 0 at 10:00:00 both as a row and in a column
    assert _post(service, batch).json() == {"accepted": 8, "rejected": []}
    assert _count(sessions) == 7, "the reading carried twice is stored once"


def test_malformed_values_in_a_series_are_named_and_the_rest_stored(service: str, sessions) -> None:  # type: ignore[no-untyped-def]
    batch = _series_batch()
    first, second = batch["series"]  # type: ignore[misc]
    first["utilization_ratio"][1] = 7.5
    first["ts"][2] = "soon"
    second["power_watts"] = [1.0, 2.0]  # two values for three timestamps: the whole series is refused
    response = _post(service, batch)
    assert response.status_code == 422
    body = response.json()
    assert body["accepted"] == 1
    assert sorted((r["field"], r.get("index"), r.get("readings")) for r in body["rejected"]) == [
        ("series[0].ts[2]", 2, None),
        ("series[0].utilization_ratio[1]", 1, None),
        ("series[1]", None, 3),
    ]
    assert "2 values for 3 timestamps" in next(r["error"] for r in body["rejected"] if r.get("readings"))
    assert _count(sessions) == 1
    metrics = service_metrics(service)
    assert "gpufinops_ingest_rejected_samples_total 5.0" in metrics


def test_a_series_with_a_bad_uuid_is_refused_whole(service: str, sessions) -> None:  # type: ignore[no-untyped-def]
    batch = _series_batch()
    batch["series"][1]["uuid"] = ""  # type: ignore[index]
    body = _post(service, batch).json()
    assert body["accepted"] == 3
    assert [(r["field"], r["readings"]) for r in body["rejected"]] == [("series[1].uuid", 3)]
    assert _count(sessions) == 3


def test_readings_of_an_undescribed_unknown_gpu_are_named_and_the_rest_stored(service: str, sessions) -> None:  # type: ignore[no-untyped-def]
    """A GPU neither in the batch's gpus nor known cannot be placed: its readings are refused (422, not a 500 that
    the collector would retry for ever), the others stored; once described, the same readings are taken."""
    stranger = "GPU-77777777-2222-3333-4444-555555555555"
    batch = _series_batch()
    batch["series"][1]["uuid"] = stranger  # type: ignore[index]
    batch["samples"] = [{"uuid": stranger, "ts": "2026-03-02T11:00:00Z", "utilization_ratio": 0.5}]
    response = _post(service, batch)
    assert response.status_code == 422
    body = response.json()
    assert body["accepted"] == 3
    assert [(r["uuid"], r["field"], r["readings"]) for r in body["rejected"]] == [(stranger, "gpus", 4)]
    assert _count(sessions) == 3
    batch["gpus"] = [*batch["gpus"], {"uuid": stranger, "index": 7, "model": GPU["model"]}]  # type: ignore[list-item]
    assert _post(service, batch).status_code == 200
    assert _count(sessions) == 7


def test_a_body_too_large_once_decompressed_is_refused(service: str, sessions, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A gzip body that inflates past MAX_BODY_BYTES (a decompression bomb) is answered 413 and nothing stored;
    the same batch within the limit is stored."""
    import finops.web.gzip_body
    import finops.web.ingest_route

    batch = _batch(3)
    size = len(orjson.dumps(batch))
    for module in (finops.web.ingest_route, finops.web.gzip_body):  # the route reads the body, gzip_body inflates it
        monkeypatch.setattr(module, "MAX_BODY_BYTES", size - 1)
    response = _post(service, batch)
    assert response.status_code == 413 and "decompressed" in response.json()["detail"]
    assert _post(service, batch, gzipped=False).status_code == 413
    assert _count(sessions) == 0
    for module in (finops.web.ingest_route, finops.web.gzip_body):  # the route reads the body, gzip_body inflates it
        monkeypatch.setattr(module, "MAX_BODY_BYTES", size)
    assert _post(service, batch).status_code == 200
    assert _count(sessions) == 3


def test_many_gzip_members_and_zero_padding_are_one_body(service: str, sessions) -> None:  # type: ignore[no-untyped-def]
    """A body of many gzip members (RFC 1952 allows a concatenation; here 20,000 empty ones ahead of the batch)
    followed by zero padding is the batch: decompressed in one linear pass."""
    body = gzip.compress(b"") * 20_000 + gzip.compress(orjson.dumps(_batch(3))) + bytes(64)
    headers = {"Content-Encoding": "gzip", "Authorization": f"Bearer {TOKEN}"}
    response = httpx.post(f"{service}/api/v1/ingest", content=body, headers=headers)
    assert response.status_code == 200 and response.json()["accepted"] == 3
    assert _count(sessions) == 3


def test_a_corrupt_or_truncated_gzip_body_is_a_400(service: str) -> None:
    compressed = gzip.compress(orjson.dumps(_batch(3)))
    headers = {"Content-Encoding": "gzip", "Authorization": f"Bearer {TOKEN}"}
    for body in (compressed[:-12], b"not gzip at all"):
        response = httpx.post(f"{service}/api/v1/ingest", content=body, headers=headers)
        assert response.status_code == 400 and "gzip" in response.json()["detail"]


def test_a_batch_without_readings_is_refused(service: str, sessions) -> None:  # type: ignore[no-untyped-def]
    response = _post(service, {"node": "gpu-a-01", "gpus": [GPU]})
    assert response.status_code == 422
    assert response.json()["rejected"][0]["field"] == "batch"
    assert _count(sessions) == 0


def test_what_the_shipper_sends_is_stored_and_odd_readings_are_named(service: str, sessions) -> None:  # type: ignore[no-untyped-def]
    rows = _batch(3)
    rows["samples"][2]["ts"] = "2026-03-02T10:02:00"  # type: ignore[index]  # no UTC offset: stays a row
    shipper = Shipper(service, TOKEN, "gpu-a-01")
    result = shipper.send({"gpus": rows["gpus"], "samples": rows["samples"]})  # type: ignore[dict-item]
    shipper.close()
    assert (result.outcome, result.accepted, result.rejected) == ("delivered", 2, 1)
    assert _count(sessions) == 2


def test_many_collectors_at_once_with_new_gpus_and_new_days(service: str, sessions) -> None:  # type: ignore[no-untyped-def]
    """Twelve nodes POST their first batches together, each with new GPUs and
    readings on three days that have no partition yet: every POST is taken whole."""
    day = (NOW // 86400 - 10) * 86400
    instants = [day + 10, day + 86400 + 10, day + 2 * 86400 + 10]

    def node(n: int) -> list[int]:
        gpus = [{**GPU, "uuid": f"GPU-{n:04d}-{i}", "index": i} for i in range(8)]
        codes = []
        for k in range(3):
            series = [{"uuid": g["uuid"], "ts": [t + k for t in instants], "power_watts": [300.0] * 3} for g in gpus]
            codes.append(_post(service, {"node": f"gpu-n-{n:02d}", "gpus": gpus, "series": series}).status_code)
        return codes

    with ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(node, range(12)))
    assert answers == [[200, 200, 200]] * 12
    assert _count(sessions) == 12 * 8 * 3 * 3


def test_batches_stored_together_are_each_answered_for_themselves(service: str, sessions) -> None:  # type: ignore[no-untyped-def]
    """Batches arriving together share a transaction; still each gets its own answer: thirty nodes' good
    batches are stored whole while, among them, one node's batch naming another node's GPU and one naming a GPU
    nobody describes lose only those GPUs' readings, each refusal in its own answer."""
    owner = {"node": "gpu-owner", "gpus": [{**GPU, "uuid": "GPU-owned"}], "series": []}
    owner["series"] = [{"uuid": "GPU-owned", "ts": [NOW - 3600], "power_watts": [300.0]}]
    assert _post(service, owner).status_code == 200

    def batch(n: int) -> dict[str, object]:
        gpus = [{**GPU, "uuid": f"GPU-{n:04d}-{i}", "index": i} for i in range(2)]
        series = [{"uuid": g["uuid"], "ts": [NOW - 600, NOW - 590], "power_watts": [300.0] * 2} for g in gpus]
        if n == 7:  # also reports the owner's GPU as its own
            gpus.append({**GPU, "uuid": "GPU-owned", "index": 5})
            series.append({"uuid": "GPU-owned", "ts": [NOW - 600], "power_watts": [1.0]})
        if n == 13:  # readings of a GPU its gpus do not describe
            series.append({"uuid": "GPU-stranger", "ts": [NOW - 600, NOW - 590, NOW - 580], "power_watts": [1.0] * 3})
        return {"node": f"gpu-t-{n:02d}", "gpus": gpus, "series": series}

    with ThreadPoolExecutor(30) as pool:
        answers = list(pool.map(lambda n: _post(service, batch(n)), range(30)))
    codes = [answer.status_code for answer in answers]
    assert codes == [422 if n in (7, 13) else 200 for n in range(30)]
    assert all(answer.json() == {"accepted": 4, "rejected": []} for n, answer in enumerate(answers) if n not in (7, 13))
    assert answers[7].json()["accepted"] == 4
    assert [(r["uuid"], r["readings"]) for r in answers[7].json()["rejected"]] == [("GPU-owned", 1)]
    assert "belongs to node gpu-owner" in answers[7].json()["rejected"][0]["error"]
    assert [(r["uuid"], r["readings"]) for r in answers[13].json()["rejected"]] == [("GPU-stranger", 3)]
    assert _count(sessions) == 1 + 30 * 4


def _shares(sessions) -> list[tuple[str, int, str, float]]:  # type: ignore[no-untyped-def]
    """The stored per-job utilisation: (GPU UUID, epoch second, job, ratio), in order."""
    from finops.db.models import GpuJobUtilization

    with sessions() as session:
        rows = session.execute(
            select(Gpu.uuid, GpuJobUtilization.ts, GpuJobUtilization.job_id, GpuJobUtilization.utilization_ratio)
            .join(Gpu)
            .order_by(GpuJobUtilization.ts, GpuJobUtilization.job_id)
        ).all()
    return [(uuid, int(ts.timestamp()), job, ratio) for uuid, ts, job, ratio in rows]


T0 = 1772445600  # the series batch's first instant


def _shared_batch() -> dict[str, object]:
    """The series batch with GPU 0 shared by jobs 501 and 502 at its first two readings."""
    return {
        **_series_batch(),
        "job_utilization": [
            {"uuid": GPU["uuid"], "ts": T0, "job_id": "501", "utilization_ratio": 0.99},
            {"uuid": GPU["uuid"], "ts": T0, "job_id": "502", "utilization_ratio": 0.0},
            {"uuid": GPU["uuid"], "ts": T0 + 10, "job_id": "501", "utilization_ratio": 0.5},
            {"uuid": GPU["uuid"], "ts": T0 + 10, "job_id": "502", "utilization_ratio": 0.25},
        ],
    }


def test_per_job_utilization_is_stored_beside_the_readings_once(service: str, sessions) -> None:  # type: ignore[no-untyped-def]
    for _ in range(2):
        assert _post(service, _shared_batch()).json() == {"accepted": 6, "rejected": []}
    uuid = GPU["uuid"]
    assert _shares(sessions) == [
        (uuid, T0, "501", 0.99), (uuid, T0, "502", 0.0), (uuid, T0 + 10, "501", 0.5), (uuid, T0 + 10, "502", 0.25)
    ]  # fmt: skip
    assert _count(sessions) == 6


def test_malformed_per_job_values_are_named_and_every_reading_stored(service: str, sessions) -> None:  # type: ignore[no-untyped-def]
    batch = _shared_batch()
    shares = batch["job_utilization"]
    shares[1]["utilization_ratio"] = 1.5  # type: ignore[index]
    shares[2]["job_id"] = ""  # type: ignore[index]
    shares[3]["ts"] = "2026-03-02T10:00:10Z"  # type: ignore[index]  # epoch seconds only
    response = _post(service, batch)
    assert response.status_code == 422
    body = response.json()
    assert body["accepted"] == 6, "the readings are not refused for a per-job value"
    assert sorted((r["job_utilization"], r["field"], r["readings"]) for r in body["rejected"]) == [
        (1, "job_utilization[1].utilization_ratio", 0),
        (2, "job_utilization[2].job_id", 0),
        (3, "job_utilization[3].ts", 0),
    ]
    assert _shares(sessions) == [(GPU["uuid"], T0, "501", 0.99)]
    assert _count(sessions) == 6
    metrics = service_metrics(service)
    assert "gpufinops_ingest_rejected_samples_total 0.0" in metrics, "no reading was rejected"

    batch["job_utilization"] = "all busy"
    body = _post(service, batch).json()
    assert (body["accepted"], [(r["field"], r["readings"]) for r in body["rejected"]]) == (6, [("job_utilization", 0)])


def test_per_job_values_of_an_unknown_gpu_go_with_its_readings(service: str, sessions) -> None:  # type: ignore[no-untyped-def]
    stranger = "GPU-77777777-2222-3333-4444-555555555555"
    batch = _shared_batch()
    batch["job_utilization"].append(  # type: ignore[attr-defined]
        {"uuid": stranger, "ts": T0, "job_id": "503", "utilization_ratio": 0.5}
    )
    body = _post(service, batch).json()
    assert body["accepted"] == 6
    assert [(r["uuid"], r["field"], r["readings"]) for r in body["rejected"]] == [(stranger, "gpus", 0)]
    assert {job for _, _, job, _ in _shares(sessions)} == {"501", "502"}


def test_the_shipper_sends_per_job_utilization(service: str, sessions) -> None:  # type: ignore[no-untyped-def]
    rows = _batch(1)
    pod = "pod/6f1c2a9e-3b4d-4e5f-8a7b-0c1d2e3f4a5b"
    share = {"uuid": GPU["uuid"], "ts": T0, "job_id": pod, "utilization_ratio": 0.5}
    shipper = Shipper(service, TOKEN, "gpu-a-01")
    result = shipper.send({"gpus": rows["gpus"], "samples": rows["samples"], "job_utilization": [share]})  # type: ignore[dict-item]
    shipper.close()
    assert (result.outcome, result.accepted, result.rejected) == ("delivered", 1, 0)
    assert _shares(sessions) == [(GPU["uuid"], T0, share["job_id"], 0.5)]
