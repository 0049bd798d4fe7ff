"""Hardware activity from a real VictoriaMetrics and a real Prometheus holding real dcgm-exporter captures
(``shared_data``/dcgm-profiling-captures: a busy Tesla T4, an idle L4 and L40S, a busy A100 with a MIG instance),
each capture's values read every minute for an hour: pulled into ``gpu_samples`` (:mod:`finops.ingest.prometheus_pull`)
and metered by PromQL (``FINOPS_TELEMETRY_SOURCE=tsdb``), the ledger's activity means are the captures' values,
profiled seconds count the readings with a profiling field, and what no capture exports (SM activity and occupancy,
the FP pipes) stays NULL, its SM-active cost too."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker

from collector.contract.wire import ACTIVITY_COLUMNS, GpuInfo
from finops.db.ledger_tables import DirtyHour, LedgerEntry, LedgerTeamHour, TsdbGpuMetering
from finops.db.models import Allocation, Gpu, GpuSample, Job, Team
from finops.ingest.prometheus import PrometheusClient
from finops.ingest.prometheus_pull import PullOptions, import_range
from finops.ingest.readings import Ingestor
from finops.ingest.tsdb_metering import TsdbMeter
from finops.ledger.rollup import rollup
from finops.timeutil import HOUR, from_epoch, to_epoch
from tests.ledger.test_tsdb_metering import PRICING
from tests.support import scenario
from tests.support.prometheus_server import TsdbLoader

CAPTURES = "dcgm-profiling-captures"
T4 = "GPU-6d5c0ac5-74d7-3130-46f1-e93ed57f469a"
L4 = "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c"
L40S = "GPU-5b4e07f6-3a86-4340-039d-25f2a83cdc43"
A100 = "GPU-34319582-d595-d1c7-d1d2-179bcfa61660"
A100_MODEL = "NVIDIA A100-SXM4-40GB"
"""The A100 capture has no ``modelName`` label; its FB_USED + FB_FREE (4,845 + 35,690 MiB) is a 40 GB A100. The
inventory supplies the model, as a collector or the REST API would."""
T4_PROFILED_FROM = 20
"""The T4's profiling fields are read from minute 20 of the hour on (dcgm-exporter restarted with them on)."""
T4_JOB = (10, 40)
"""The T4's job holds it from minute 10 to minute 40 of the hour: two cuts inside it."""

_LINE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\}) (\S+)$")

# Hand-computed from the captures (SOURCE.md): each activity's value, constant over the hour, is its mean.
CAPTURED = {
    T4: {"graphics_engine_active_ratio": 0.156205, "tensor_active_ratio": 0.005822, "dram_active_ratio": 0.092781},
    L4: {"graphics_engine_active_ratio": 0.0, "tensor_active_ratio": 0.0, "dram_active_ratio": 0.0},
    L40S: {"graphics_engine_active_ratio": 0.0, "tensor_active_ratio": 0.0, "dram_active_ratio": 0.000131},
    # The whole GPU's series; the MIG instance's (0.995687, 0.930433, 0.800339) are left out.
    A100: {"graphics_engine_active_ratio": 0.995630, "tensor_active_ratio": 0.929260, "dram_active_ratio": 0.690789},
}


def capture_series(path: Path) -> list[tuple[str, str, str]]:
    """(name, ``{labels}``, value) of each distinct series line of a capture (comments, blank lines and the
    documentation's markup left out; the L4 capture holds two identical scrapes)."""
    found = [m.groups() for line in path.read_text().splitlines() if (m := _LINE.match(line.strip()))]
    return list(dict.fromkeys((name, labels, value) for name, labels, value in found))


def hour_of_readings(folder: Path, hour: int) -> list[str]:
    """Every capture's series read every minute of [hour, hour + 1 h) (exposition lines, timestamps in ms); the T4's
    profiling fields from :data:`T4_PROFILED_FROM` on."""
    lines = []
    for path in sorted(folder.glob("*.prom")):
        for name, labels, value in capture_series(path):
            first = T4_PROFILED_FROM if T4 in labels and name.startswith("DCGM_FI_PROF_") else 0
            lines += [f"{name}{labels} {value} {(hour + 60 * minute) * 1000}" for minute in range(first, 60)]
    return lines


def hold(session: Session, hour: int, jobs: Mapping[str, tuple[int, int]] | None = None) -> None:
    """A job of team epsilon on each GPU: from minute to minute of the hour as ``jobs`` (GPU UUID -> (first, last);
    by default the T4's :data:`T4_JOB`), the others' all hour."""
    jobs = {T4: T4_JOB} if jobs is None else jobs
    team = Team(name="epsilon")
    session.add(team)
    session.flush()
    for number, gpu in enumerate(session.scalars(select(Gpu).order_by(Gpu.uuid))):
        start, end = (hour + 60 * m for m in jobs[gpu.uuid]) if gpu.uuid in jobs else (hour, hour + HOUR)
        job = Job(
            scheduler="slurm", cluster="c", job_id=str(700 + number), job_id_raw=str(700 + number), user="u",
            account="a", partition="p", name="j", state="COMPLETED", start=from_epoch(start),
            end=from_epoch(end), gpus=1, node_list="n", team_id=team.id,
        )  # fmt: skip
        session.add(job)
        session.flush()
        session.add(Allocation(job_pk=job.id, gpu_id=gpu.id, start=from_epoch(start), end=from_epoch(end)))
    session.flush()


def ledger_activity(session: Session) -> dict[tuple[str, bool], LedgerEntry]:
    """The ledger rows of the hour by (GPU UUID, allocated)."""
    rows = session.execute(select(Gpu.uuid, LedgerEntry).join(Gpu, Gpu.id == LedgerEntry.gpu_id))
    return {(uuid, row.job_pk is not None): row for uuid, row in rows}


def assert_activity(rows: dict[tuple[str, bool], LedgerEntry], expected: dict[str, dict[str, float]]) -> None:
    """Each held GPU's row has the expected means (the others NULL) and an SM-active cost of NULL (no capture has SM
    activity); the T4's unallocated rest has none."""
    for uuid, means in expected.items():
        row = rows[uuid, True]
        for column in ACTIVITY_COLUMNS:
            if column in means:
                assert getattr(row, column) == pytest.approx(means[column], abs=1e-12), (uuid, column)
            else:
                assert getattr(row, column) is None, (uuid, column)
        assert row.sm_active_cost is None, uuid
    assert all(getattr(rows[T4, False], column) is None for column in ACTIVITY_COLUMNS)
    assert rows[T4, False].profiled_seconds == 0
    # The T4's job: 30 readings, 20 of them with profiling fields: 1800 s × 20 / 30.
    assert rows[T4, True].profiled_seconds == 1200
    assert rows[L4, True].profiled_seconds == rows[L40S, True].profiled_seconds == HOUR
    # Priced (the L40S), yet no SM activity measured: the SM-active cost is NULL, not 0.
    assert rows[L40S, True].allocated_cost is not None


def test_captures_pulled_and_metered_from_the_tsdb_give_their_activity(
    sessions: sessionmaker[Session], tsdb: TsdbLoader, shared_data: Path, caplog: pytest.LogCaptureFixture
) -> None:
    hour = to_epoch(scenario.start_hour() - timedelta(days=2))
    client = PrometheusClient(tsdb(hour_of_readings(shared_data / CAPTURES, hour)))
    with sessions.begin() as session:
        # The A100 is known from the inventory: its series carry no modelName, so the pull cannot place them.
        Ingestor().register(session, "ub20-a100-k8s", [GpuInfo(uuid=A100, index=0, model=A100_MODEL)], {A100: hour})
    with caplog.at_level(logging.WARNING, logger="finops.ingest.prometheus_pull"):
        pulled = import_range(sessions, client, from_epoch(hour), from_epoch(hour + HOUR), PullOptions(step_seconds=60))
    assert pulled.gpus == {T4, L4, L40S}
    assert pulled.readings == 3 * 60
    assert "no modelName" in caplog.text
    with sessions.begin() as session:
        hold(session, hour)
        rollup(session, PRICING, hour + HOUR)
        direct = ledger_activity(session)
        assert_activity(direct, {uuid: means for uuid, means in CAPTURED.items() if uuid != A100})
        # Pulled: no reading of the A100, so nothing measured (NULL, never 0).
        assert all(getattr(direct[A100, True], column) is None for column in ACTIVITY_COLUMNS)
        assert direct[A100, True].profiled_seconds == 0

        for model in (LedgerEntry, LedgerTeamHour, GpuSample, DirtyHour):
            session.execute(delete(model))
        rollup(session, PRICING, hour + HOUR, meter=TsdbMeter(client))
        metered = ledger_activity(session)
        assert_activity(metered, CAPTURED)
        assert metered[A100, True].profiled_seconds == HOUR
        # Readings and samples counted alike; the A100 has no utilisation series, only profiling fields.
        segments = {
            uuid: (s.samples, s.readings, s.profiled)
            for uuid, s in session.execute(
                select(Gpu.uuid, TsdbGpuMetering).join(Gpu, Gpu.id == TsdbGpuMetering.gpu_id)
            )
        }
        assert segments[L4] == segments[L40S] == (60, 60, 60)
        assert segments[A100] == (0, 60, 60)
        for uuid in CAPTURED:
            for column in ("profiled_seconds", *ACTIVITY_COLUMNS):
                if uuid != A100:
                    assert getattr(metered[uuid, True], column) == pytest.approx(
                        getattr(direct[uuid, True], column), abs=1e-12
                    ), (uuid, column)
