"""A fleet of NVIDIA H100s and an AMD MI300X in CPX mode, billed together: readings (NVML-shaped samples for the H100
node, the amdsmi source against its stand-in for the MI300X node), Slurm jobs (sacct lines) and a Kubernetes pod
holding ``amd.com/gpu`` partitions, through ingest, rollup and the cost report, on both databases. Every GPU-hour is
metered, each model priced at its own rate (a CPX partition at 1/8 of the MI300X's), and the report's totals are the
ledger's, nothing counted twice."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from collector.contract import metric_names as m
from collector.contract.sample import Sample
from collector.contract.wire import IngestBatch, batch_dict, columnar
from collector.sources.amdsmi import AmdSmiSource
from finops.analysis.report import cost_report
from finops.db.ledger_tables import LedgerEntry
from finops.db.models import Gpu, Job
from finops.ingest.readings import Ingestor
from finops.jobs.kubernetes import parse_nodes
from finops.jobs.kubernetes_import import import_pods
from finops.jobs.slurm_import import import_sacct
from finops.ledger.rollup import rollup
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.timeutil import HOUR, from_epoch, to_epoch
from tests.support.fake_amdsmi import FakeAmdSmi, mi300x_cpx
from tests.support.sacct_lines import make_line

START = datetime(2026, 10, 5, 10, tzinfo=UTC)
T0 = to_epoch(START)
STEP = 60
H100 = "NVIDIA H100 80GB HBM3"
H100_UUIDS = ("GPU-1d2c3b4a-0000-4000-8000-00000000h100", "GPU-1d2c3b4a-0000-4000-8000-00000001h100")


def _h100_batch(now: int) -> IngestBatch:
    """Two H100s on ``gpu-h-01`` as the NVML source labels them, half busy, 300 W; written by hand."""
    samples = [
        Sample(
            "gpu",
            {"gpu": str(index), "uuid": uuid, "model": H100, "mig_profile": "", "parent_uuid": ""},
            {m.GPU_UP: 1.0, m.GPU_UTILIZATION: 0.5, m.GPU_POWER: 300.0},
            from_epoch(now),
        )
        for index, uuid in enumerate(H100_UUIDS)
    ]
    return IngestBatch.model_validate({"node": "gpu-h-01", **columnar(batch_dict(samples))})


def _slurm_lines() -> list[str]:
    """One H100 job holding a GPU for the whole hour, one holding both H100s for its first half."""
    when = {"Submit": "2026-10-05T09:59:00", "Start": "2026-10-05T10:00:00", "State": "COMPLETED"}
    return [
        make_line(JobID="9001", JobIDRaw="9001", End="2026-10-05T11:00:00", Elapsed="01:00:00",
                  AllocTRES="cpu=16,gres/gpu:h100=1,gres/gpu=1,node=1", NodeList="gpu-h-01", **when),
        make_line(JobID="9002", JobIDRaw="9002", Account="vision", End="2026-10-05T10:30:00", Elapsed="00:30:00",
                  AllocTRES="cpu=16,gres/gpu:h100=1,gres/gpu=1,node=1", NodeList="gpu-h-01", **when),
    ]  # fmt: skip


def _pod_documents() -> tuple[dict[str, Any], dict[str, Any]]:
    """The MI300X node as AMD's node labeller shows it, and a pod holding two of its partitions for the hour."""
    node = {
        "metadata": {"name": "amd-01", "labels": {"amd.com/gpu.product-name": "AMD_Instinct_MI300X"}},
        "status": {"capacity": {"amd.com/gpu": "8", "cpu": "192"}},
    }
    pod = {
        "metadata": {"namespace": "llm", "name": "trainer-0", "uid": "7b1e0c2a-5d4f-4e3a-9c8b-1a2b3c4d5e6f"},
        "spec": {
            "nodeName": "amd-01",
            "containers": [{"name": "pytorch", "resources": {"limits": {"amd.com/gpu": "2"}}}],
        },
        "status": {
            "phase": "Succeeded",
            "startTime": "2026-10-05T10:00:00Z",
            "containerStatuses": [
                {"state": {"terminated": {"startedAt": "2026-10-05T10:00:00Z", "finishedAt": "2026-10-05T11:00:00Z"}}}
            ],
        },
    }
    return {"kind": "List", "items": [node]}, {"kind": "List", "items": [pod]}


def test_a_mixed_fleet_is_metered_priced_per_model_and_reported_once(sessions: sessionmaker[Session]) -> None:
    partitions = mi300x_cpx()
    now = T0
    amd = AmdSmiSource(FakeAmdSmi(partitions), clock=lambda: from_epoch(now))
    ingestor = Ingestor()
    while now <= T0 + HOUR:
        amd_batch = IngestBatch.model_validate({"node": "amd-01", **columnar(batch_dict(amd.collect()))})
        with sessions.begin() as session:
            ingestor.store(session, _h100_batch(now))
            ingestor.store(session, amd_batch)
        now += STEP
    node_list, pods = _pod_documents()
    nodes, errors = parse_nodes(node_list, source="nodes.json")
    assert errors == []
    pricing = Pricing(load_catalog(), PricingModel.ON_DEMAND)
    with sessions.begin() as session:
        slurm = import_sacct(session, _slurm_lines(), source="sacct.txt", cluster="orion")
        assert slurm.errors == []
        kube = import_pods(session, pods, source="pods.json", nodes=nodes, listed_at=START + timedelta(hours=2))
        assert (kube.jobs, kube.errors) == (1, [])
        rollup(session, pricing, T0 + HOUR)

    with sessions() as session:
        ledger = session.execute(
            select(Gpu.uuid, Gpu.model, LedgerEntry.job_pk, LedgerEntry.seconds, LedgerEntry.sample_count,
                   LedgerEntry.allocated_cost)
            .join(LedgerEntry, LedgerEntry.gpu_id == Gpu.id)
            .where(LedgerEntry.hour == START)
        ).all()  # fmt: skip
        jobs = {job.job_id: job.id for job in session.scalars(select(Job))}
        report = cost_report(session, START, START + timedelta(hours=1))
        by_job = cost_report(session, START, START + timedelta(hours=1), by="job")
        by_model = cost_report(session, START, START + timedelta(hours=1), by="gpu_model", catalog=pricing.catalog)
        ledger_total = session.scalar(select(func.sum(LedgerEntry.allocated_cost)).where(LedgerEntry.hour == START))

    catalog = pricing.catalog
    h100_rate = catalog.rate(H100, PricingModel.ON_DEMAND, START)
    mi300x_rate = catalog.rate("AMD Instinct MI300X", PricingModel.ON_DEMAND, START)
    assert h100_rate != mi300x_rate / 8
    uuids = [*H100_UUIDS, *(p.uuid for p in partitions)]
    seconds = {uuid: sum(row.seconds for row in ledger if row.uuid == uuid) for uuid in uuids}
    assert seconds == dict.fromkeys(uuids, HOUR)  # every GPU's hour once: held plus unheld, no more
    assert all(row.sample_count > 0 for row in ledger)  # every row metered
    assert all(row.allocated_cost is not None for row in ledger)  # every row priced
    for row in ledger:
        rate = h100_rate if row.model == H100 else mi300x_rate / 8
        assert abs(row.allocated_cost - rate * row.seconds / HOUR) < Decimal("0.000001"), row
    # The jobs: 9001 a whole H100-hour, 9002 half of one, the pod two partition-hours.
    held = {job_id: sum(row.allocated_cost for row in ledger if row.job_pk == pk) for job_id, pk in jobs.items()}
    assert abs(held["9001"] - h100_rate) < Decimal("0.000001")
    assert abs(held["9002"] - h100_rate / 2) < Decimal("0.000001")
    assert abs(held["llm/trainer-0"] - mi300x_rate * 2 / 8) < Decimal("0.000001")

    capacity = 2 * h100_rate + mi300x_rate
    assert ledger_total is not None and abs(ledger_total - capacity) < Decimal("0.000001")
    models = {row.key: row for row in by_model}
    assert sorted(row.allocated_gpu_seconds for row in by_model) == [2 * HOUR, 8 * HOUR]
    assert sorted(row.allocated_cost for row in by_model) == sorted([2 * h100_rate, mi300x_rate])
    assert len(models) == 2
    for rows in (report, by_job, by_model):
        assert sum(row.allocated_gpu_seconds for row in rows) == 10 * HOUR
        assert sum(row.allocated_cost for row in rows) == ledger_total  # nothing counted twice, nothing lost
        assert sum(row.unpriced_gpu_seconds for row in rows) == 0
