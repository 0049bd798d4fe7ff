"""Capacity from the node inventory (both databases): ``nodes import`` gives each node the GPUs its Gres names, in
service from the import's time by its State; a node gone from the inventory leaves service; a GPU only job imports
know is in service only while jobs held it. Every figure is checked in the ledger a rollup writes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from collector.contract.wire import IngestBatch
from finops.db.ledger_tables import LedgerEntry
from finops.db.models import Gpu, GpuService, Node
from finops.ingest.readings import Ingestor
from finops.jobs.capacity import in_service, physical_gpus, unavailable
from finops.jobs.inventory import InventoryResult, import_nodes, node_summaries
from finops.jobs.slurm_import import import_sacct
from finops.ledger.rollup import rollup
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.timeutil import HOUR, to_epoch

FIXTURES = Path(__file__).parents[1] / "fixtures"
STATES = FIXTURES / "scontrol" / "scontrol_site_states.txt"
CATALOG = load_catalog()
PRICING = Pricing(CATALOG, PricingModel.ON_DEMAND)
T = datetime(2026, 10, 4, 0, 0, tzinfo=UTC)


def _import(session: Session, lines: list[str], at: datetime, **options: object) -> InventoryResult:
    return import_nodes(session, lines, source="scontrol", resolve=CATALOG.resolve, at=at, cluster="site", **options)  # type: ignore[arg-type]


def _lines(*without: str) -> list[str]:
    return [line for line in STATES.read_text().splitlines() if line.split()[0].split("=")[1] not in without]


def _capacity(session: Session, until: datetime) -> dict[str, tuple[int, int]]:
    """Hostname → (in-service GPU-seconds, of them held by jobs) in [T, until), after a rollup."""
    rollup(session, PRICING, to_epoch(until))
    rows = session.execute(
        select(Node.hostname, LedgerEntry.job_pk.is_not(None), func.sum(LedgerEntry.seconds))
        .join(Gpu, Gpu.id == LedgerEntry.gpu_id)
        .join(Node, Node.id == Gpu.node_id)
        .where(LedgerEntry.hour >= T, LedgerEntry.hour < until)
        .group_by(Node.hostname, LedgerEntry.job_pk.is_not(None))
    ).all()
    totals: dict[str, tuple[int, int]] = {}
    for hostname, held, seconds in rows:
        total, jobs = totals.get(hostname, (0, 0))
        totals[hostname] = (total + int(seconds), jobs + (int(seconds) if held else 0))
    return totals


def test_node_states_and_gres_counts() -> None:
    assert in_service("IDLE") and in_service("MIXED+DRAIN") and in_service("DOWN*") and in_service(None)
    assert not in_service("FUTURE") and not in_service("IDLE+CLOUD+POWERED_DOWN")
    assert in_service("IDLE+POWERED_DOWN"), "an owned node powered down to save power is still owned"
    assert unavailable("MIXED+DRAIN") and unavailable("DOWN*") and unavailable("IDLE+NOT_RESPONDING")
    assert not unavailable("ALLOCATED") and not unavailable("MIXED") and not unavailable("FUTURE")
    assert physical_gpus([("h100", 8)], None) == 8
    assert physical_gpus([("a100", 2), ("a100_3g.40gb", 4)], "A100-SXM4-80GB") == 4  # 2 + ⌈4 × 3/7⌉
    assert physical_gpus([("1g.10gb", 7)], None) == 1
    assert physical_gpus([(None, 4)], None) == 4


def test_the_inventory_creates_gpus_in_service_by_state(sessions) -> None:  # type: ignore[no-untyped-def]
    until = T + timedelta(hours=3)
    with sessions.begin() as session:
        result = _import(session, _lines(), T)
        assert result.nodes == 7 and not result.errors
        assert result.capacity.gpus_created == 4 * 5 + 4
        assert result.capacity.unavailable == ["site-g-02 (MIXED+DRAIN)", "site-g-03 (DOWN*)"]
        capacity = _capacity(session, until)
        summaries = {s.hostname: s for s in node_summaries(session)}
    hours = 3 * HOUR
    assert capacity == {
        "site-g-01": (4 * hours, 0),
        "site-g-02": (4 * hours, 0),  # drained: its GPUs are paid for all the same
        "site-g-03": (4 * hours, 0),  # down
        "site-m-01": (4 * hours, 0),
    }, "FUTURE and a powered-down cloud node have no capacity; a node without GRES has no GPU"
    drained = summaries["site-g-02"]
    assert drained.state == "MIXED+DRAIN" and drained.state_since == T
    assert drained.state_reason == "bad DIMM, waiting for a part [root@2026-11-02T10:00:00]"
    assert summaries["site-g-04"].placeholders == 4 and summaries["site-g-01"].model == "H100-SXM-80GB"


def test_a_node_gone_from_the_inventory_leaves_service_and_comes_back(sessions) -> None:  # type: ignore[no-untyped-def]
    with sessions.begin() as session:
        _import(session, _lines(), T)
        partial = _import(session, _lines("site-g-01"), T + timedelta(hours=1), partial=True)
        assert partial.capacity.gone == []
        bad = _import(session, [*_lines("site-g-01"), "not scontrol output"], T + timedelta(hours=1))
        assert bad.capacity.gone == [] and len(bad.errors) == 1, "a bad line could be the missing node's"
        gone = _import(session, _lines("site-g-01"), T + timedelta(hours=1, minutes=30))
        assert gone.capacity.gone == ["site-g-01"]
        back = _import(session, _lines(), T + timedelta(hours=2, minutes=15))
        assert back.capacity.gone == [] and back.capacity.entered == 1  # site-g-01
        up = _import(session, [line.replace("FUTURE", "IDLE") for line in _lines()], T + timedelta(hours=2, minutes=40))
        assert up.capacity.entered == 1  # site-g-04 enters service
        capacity = _capacity(session, T + timedelta(hours=4))
        periods = session.execute(
            select(GpuService.start, GpuService.end)
            .join(Gpu, Gpu.id == GpuService.gpu_id)
            .join(Node, Node.id == Gpu.node_id)
            .where(Node.hostname == "site-g-01", Gpu.gpu_index == 0)
            .order_by(GpuService.start)
        ).all()
        summary = {s.hostname: s for s in node_summaries(session)}["site-g-01"]
    assert [tuple(p) for p in periods] == [
        (T, T + timedelta(hours=1, minutes=30)),
        (T + timedelta(hours=2, minutes=15), None),
    ]
    assert summary.state == "IDLE" and summary.state_since == T + timedelta(hours=2, minutes=15)
    minutes = 60
    assert capacity["site-g-01"] == (4 * (90 + 105) * minutes, 0), "out of service for 45 minutes"
    assert capacity["site-g-04"] == (4 * 80 * minutes, 0), "in service from the import that saw it IDLE"


def _sacct(number: int, node: str, start: datetime, minutes: int, gpus: int) -> str:
    begin = start.strftime("%Y-%m-%dT%H:%M:%S")
    end = (start + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%S")
    elapsed = f"{minutes // 60:02d}:{minutes % 60:02d}:00"
    return f"{number}|{number}|site|gpu|acct|u|{begin}|{begin}|{end}|{elapsed}|COMPLETED|gres/gpu={gpus}|{node}|j"


def test_a_gpu_only_jobs_know_is_in_service_only_while_they_hold_it(sessions) -> None:  # type: ignore[no-untyped-def]
    jobs = [  # on a node no inventory lists: gaps inside an hour, between hours, and overlapping jobs on 2 GPUs
        _sacct(1, "lone-01", T + timedelta(minutes=10), 20, 1),
        _sacct(2, "lone-01", T + timedelta(minutes=40), 50, 2),
        _sacct(3, "lone-01", T + timedelta(hours=2, minutes=5), 30, 1),
        _sacct(4, "site-g-01", T + timedelta(minutes=30), 60, 4),  # an inventory node: in service all along
    ]
    with sessions.begin() as session:
        _import(session, _lines(), T)
        assert import_sacct(session, jobs, source="sacct", cluster="site").jobs == 4
        capacity = _capacity(session, T + timedelta(hours=3))
    minutes = 60
    held = (20 + 2 * 50 + 30) * minutes
    assert capacity["lone-01"] == (held, held), "no capacity beyond the jobs' GPU-seconds"
    assert capacity["site-g-01"] == (4 * 3 * HOUR, 4 * 60 * minutes)


def test_a_collectors_gpus_keep_their_service_under_the_inventory(sessions) -> None:  # type: ignore[no-untyped-def]
    gpus = [{"uuid": f"GPU-g01-{i}", "index": i, "model": "NVIDIA H100 80GB HBM3"} for i in range(4)]
    samples = [{"uuid": g["uuid"], "ts": T, "utilization_ratio": 0.5} for g in gpus]
    with sessions.begin() as session:
        Ingestor().store(session, IngestBatch.model_validate({"node": "site-g-01", "gpus": gpus, "samples": samples}))
        result = _import(session, _lines(), T + timedelta(hours=1))
        assert result.capacity.gpus_created == 4 * 4 + 4, "site-g-01's four GPUs are the collector's"
        capacity = _capacity(session, T + timedelta(hours=3))
    assert capacity["site-g-01"] == (4 * 3 * HOUR, 0), "in service from the first reading, not from the import"
    assert capacity["site-g-02"] == (4 * 2 * HOUR, 0)
