"""Per-job utilisation of shared GPUs: stored by ingest beside the readings, read per GPU-hour for the ledger."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from collector.contract.wire import IngestBatch
from finops.db.ledger_tables import DirtyHour
from finops.db.models import Gpu, GpuJobUtilization
from finops.ingest.readings import Ingestor
from finops.ledger.job_utilization import job_utilization_by_gpu_hour
from finops.timeutil import to_epoch

H = 1_772_445_600  # 2026-03-02T10:00Z
MODEL = "NVIDIA H100 80GB HBM3"
GPUS = [{"uuid": f"GPU-{i}", "index": i, "model": MODEL} for i in range(3)]


def _batch(shares: list[tuple[str, int, str, float]]) -> IngestBatch:
    """GPUs 0-2 of one node, a reading of each at every instant of ``shares`` (uuid, ts, job, ratio), and the
    shares as the batch's job_utilization."""
    instants = sorted({ts for _, ts, _, _ in shares})
    return IngestBatch.model_validate(
        {
            "node": "gpu-a-01",
            "gpus": GPUS,
            "series": [{"uuid": g["uuid"], "ts": instants, "utilization_ratio": [0.9] * len(instants)} for g in GPUS],
            "job_utilization": [
                {"uuid": uuid, "ts": ts, "job_id": job, "utilization_ratio": ratio} for uuid, ts, job, ratio in shares
            ],
        }
    )


def _ids(sessions: sessionmaker[Session]) -> dict[str, int]:
    with sessions() as session:
        return {str(uuid): gpu_id for uuid, gpu_id in session.execute(select(Gpu.uuid, Gpu.id))}


SHARES = [
    ("GPU-0", H + 10, "501", 0.25), ("GPU-0", H + 10, "502", 0.75),
    ("GPU-0", H + 20, "501", 0.5), ("GPU-0", H + 20, "502", 0.0),
    ("GPU-0", H + 30, "503", 0.125), ("GPU-0", H + 30, "501", 0.0),  # job 503 only in one reading
    ("GPU-0", H + 3600, "501", 1.0), ("GPU-0", H + 3600, "502", 0.0),  # the next hour
    ("GPU-1", H + 3599, "pod/6f1c2a9e-3b4d-4e5f-8a7b-0c1d2e3f4a5b", 0.5), ("GPU-1", H + 3599, "77", 0.5),
    ("GPU-0", H - 1, "501", 0.9), ("GPU-0", H - 1, "502", 0.1),  # the hour before
]  # fmt: skip


def test_means_per_gpu_hour_and_job_over_the_jobs_own_readings(sessions: sessionmaker[Session]) -> None:
    with sessions.begin() as session:
        assert Ingestor().store(session, _batch(SHARES)) == 3 * 6, "6 instants x 3 GPUs: readings counted, shares not"
    ids = _ids(sessions)
    with sessions() as session:
        found = job_utilization_by_gpu_hour(session, H, H + 3600)
        both = job_utilization_by_gpu_hour(session, H, H + 7200)
        assert job_utilization_by_gpu_hour(session, H + 7200, H + 7200) == {}
    assert found == {
        (ids["GPU-0"], H): {"501": 0.25, "502": 0.375, "503": 0.125},
        (ids["GPU-1"], H): {"pod/6f1c2a9e-3b4d-4e5f-8a7b-0c1d2e3f4a5b": 0.5, "77": 0.5},
    }, "GPU 2 was never shared: no entry; the hours before and after are outside [h0, h1)"
    assert both == {**found, (ids["GPU-0"], H + 3600): {"501": 1.0, "502": 0.0}}


def test_shares_mark_their_hours_dirty_register_the_gpu_and_replay_once(sessions: sessionmaker[Session]) -> None:
    batch = _batch(SHARES)
    for _ in range(2):
        with sessions.begin() as session:
            Ingestor().store(session, batch)
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(GpuJobUtilization)) == len(SHARES)
        hours = {to_epoch(h) for h in session.scalars(select(DirtyHour.hour))}
        first = session.scalar(select(Gpu.in_service_from).where(Gpu.uuid == "GPU-0"))
    assert hours == {H - 3600, H, H + 3600}
    assert first is not None and to_epoch(first) == H - 1


def test_only_whole_hour_ranges(sessions: sessionmaker[Session]) -> None:
    with sessions() as session, pytest.raises(ValueError, match="whole hours"):
        job_utilization_by_gpu_hour(session, H + 1, H + 3600)
    with sessions() as session, pytest.raises(ValueError, match="whole hours"):
        job_utilization_by_gpu_hour(session, H + 3600, H)
