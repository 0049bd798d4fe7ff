"""The node inventory: scontrol parsing, GPU models resolved through the price catalog, set by hand, a collector's
reading winning, and a sacct history without collectors priced by the models schedulers name."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select

from collector.contract.wire import IngestBatch
from finops.db.ledger_tables import DirtyHour, LedgerEntry
from finops.db.models import Gpu, Job, Node
from finops.ingest.readings import Ingestor
from finops.jobs.inventory import InventoryError, import_nodes, node_summaries, parse_scontrol_nodes, set_model
from finops.jobs.slurm import parse_sacct
from finops.jobs.slurm_import import import_sacct
from finops.ledger.rollup import rollup
from finops.pricing.catalog import PriceCatalog, Pricing, PricingModel, load_catalog
from finops.timeutil import to_epoch

FIXTURES = Path(__file__).parents[1] / "fixtures"
SCONTROL = FIXTURES / "scontrol" / "scontrol_nodes_oneliner.txt"
SACCT = FIXTURES / "sacct" / "sacct_gpu_models.txt"
CATALOG = load_catalog()
CHOICES = sorted(CATALOG.models)


def _import_inventory(session) -> object:  # type: ignore[no-untyped-def]
    with SCONTROL.open() as handle:
        return import_nodes(session, handle, source=str(SCONTROL), resolve=CATALOG.resolve, at=datetime.now(UTC))


def _models(session) -> dict[str, str | None]:  # type: ignore[no-untyped-def]
    return {h: m for h, m in session.execute(select(Node.hostname, Node.gpu_model))}


def test_scontrol_oneliner_is_parsed_and_bad_lines_are_named() -> None:
    parsed = parse_scontrol_nodes(SCONTROL.read_text().splitlines(), source="nodes.txt")
    nodes = {node.hostname: node for node in parsed.nodes}
    assert len(nodes) == 11
    assert [(e.line_number, e.message.split(": ", 1)[0]) for e in parsed.errors] == [
        (9, "nodes.txt:9"),
        (13, "nodes.txt:13"),
    ]
    assert "NodeName" in parsed.errors[0].message and "gpu:a100:x:y:4" in parsed.errors[1].message
    assert nodes["gpu-a-01"].gpus == (("a100", 4),) and nodes["gpu-a-01"].partitions == ("gpu", "debug")
    assert nodes["gpu-h-01"].gpus == (("h100", 8),)  # the shard GRES is not a GPU
    # AMD GRES types: an MI300X node's 8 GPUs, an MI250X node's 8 GCDs (4 modules).
    assert nodes["gpu-x-01"].gpus == (("mi300x", 8),) and nodes["gpu-m-01"].gpus == (("mi250x", 8),)
    assert nodes["gpu-u-01"].gpus == ((None, 4),) and nodes["gpu-u-01"].gpu_types == []
    assert nodes["gpu-g-01"].gpus == (("1g.10gb", 7),) and nodes["gpu-g-01"].gpu_types == []
    assert nodes["cpu-01"].gpus == () and nodes["cpu-01"].partitions == ("cpu",)
    assert nodes["gpu-v-01"].partitions == ("legacy",)  # Reason with spaces after it does not disturb the fields


def test_import_records_catalog_models_and_keeps_unknown_types(sessions) -> None:  # type: ignore[no-untyped-def]
    with sessions.begin() as session:
        result = _import_inventory(session)
    assert result.nodes == 11 and len(result.errors) == 2  # type: ignore[attr-defined]
    unresolved = "\n".join(result.unresolved)  # type: ignore[attr-defined]
    assert "gpu-v-01: GPU type 'v100' names no price catalog model" in unresolved
    assert "gpu-finops nodes set-model gpu-v-01 MODEL" in unresolved
    assert "gpu-u-01: untyped GPUs" in unresolved
    with sessions() as session:
        models = _models(session)
        partitions = {h: p for h, p in session.execute(select(Node.hostname, Node.partitions))}
    assert models == {
        "gpu-a-01": "A100-SXM4-80GB",
        "gpu-a-02": "A100-SXM4-80GB",
        "gpu-h-01": "H100-SXM-80GB",
        "gpu-l-01": "L40S",
        "gpu-m-01": "MI250X",
        "gpu-x-01": "MI300X",
        "gpu-n-01": "H100-SXM-80GB",
        "gpu-v-01": "v100",  # kept raw, never dropped
        "gpu-u-01": None,
        "gpu-g-01": None,
        "cpu-01": None,
    }
    assert partitions["gpu-a-01"] == "gpu,debug" and partitions["cpu-01"] == "cpu"


def test_set_model_by_node_and_partition(sessions) -> None:  # type: ignore[no-untyped-def]
    with sessions.begin() as session:
        _import_inventory(session)
        assert set_model(
            session, "h100", resolve=CATALOG.resolve, choices=CHOICES, node="gpu-u-01", actor="system:test"
        )[:2] == (
            "H100-SXM-80GB",
            ["gpu-u-01"],
        )
        key, hosts, _ = set_model(
            session,
            "AMD Instinct MI300X",
            resolve=CATALOG.resolve,
            choices=CHOICES,
            partition="legacy",
            actor="system:test",
        )
        assert (key, hosts) == ("MI300X", ["gpu-u-01", "gpu-v-01"])
        # a hand-set model is not undone by a re-import whose type names no catalog model
        _import_inventory(session)
    with sessions() as session:
        models = _models(session)
    assert models["gpu-u-01"] == models["gpu-v-01"] == "MI300X"
    with sessions.begin() as session:
        with pytest.raises(InventoryError, match=r"'v100' is not a price catalog model; choose one of: A100-SXM4-80GB"):
            set_model(session, "v100", resolve=CATALOG.resolve, choices=CHOICES, node="gpu-v-01", actor="system:test")
        with pytest.raises(InventoryError, match="no node 'gpu-q-99'"):
            set_model(session, "a100", resolve=CATALOG.resolve, choices=CHOICES, node="gpu-q-99", actor="system:test")
        with pytest.raises(InventoryError, match="no node in partition 'nowhere'"):
            set_model(
                session, "a100", resolve=CATALOG.resolve, choices=CHOICES, partition="nowhere", actor="system:test"
            )


def _collector_reports(session, node: str, model: str, at: datetime) -> None:  # type: ignore[no-untyped-def]
    gpus = [{"uuid": f"GPU-{node}-{i}", "index": i, "model": model} for i in range(4)]
    samples = [{"uuid": f"GPU-{node}-{i}", "ts": at, "utilization_ratio": 0.5} for i in range(4)]
    Ingestor().store(session, IngestBatch.model_validate({"node": node, "gpus": gpus, "samples": samples}))


def test_a_collectors_reading_wins_over_the_inventory(sessions) -> None:  # type: ignore[no-untyped-def]
    at = datetime(2024, 5, 6, 7, 0, tzinfo=UTC)
    with sessions.begin() as session:
        _import_inventory(session)
        _collector_reports(session, "gpu-a-01", "NVIDIA H100 80GB HBM3", at)  # the inventory says A100
        _, _, changed = set_model(
            session, "l40s", resolve=CATALOG.resolve, choices=CHOICES, node="gpu-a-01", actor="system:test"
        )
        assert changed == 0
        import_sacct(session, SACCT.read_text().splitlines(), source="sacct", cluster="orion")
    with sessions() as session:
        models = set(
            session.scalars(select(Gpu.model).join(Node, Node.id == Gpu.node_id).where(Node.hostname == "gpu-a-01"))
        )
        summary = {s.hostname: s for s in node_summaries(session)}
    assert models == {"NVIDIA H100 80GB HBM3"}
    assert summary["gpu-a-01"].model == "NVIDIA H100 80GB HBM3" and summary["gpu-a-01"].inventory_model == "L40S"


def test_a_model_set_later_reprices_placeholders_and_marks_their_hours(sessions) -> None:  # type: ignore[no-untyped-def]
    with sessions.begin() as session:
        import_sacct(session, SACCT.read_text().splitlines(), source="sacct", cluster="orion")  # no inventory yet
        session.execute(DirtyHour.__table__.delete())  # type: ignore[attr-defined]
        _import_inventory(session)  # gpu-a-02's untyped placeholders become A100s
    with sessions() as session:
        placeholders = set(
            session.scalars(select(Gpu.model).join(Node, Node.id == Gpu.node_id).where(Node.hostname == "gpu-a-02"))
        )
        dirty = set(session.scalars(select(DirtyHour.hour)))
    assert placeholders == {"A100-SXM4-80GB"}
    assert {datetime(2024, 5, 6, h, tzinfo=UTC) for h in (8, 9, 10, 11)} <= dirty


def _pricing(catalog: PriceCatalog) -> Pricing:
    return Pricing(catalog, PricingModel.ON_PREM)


def test_a_sacct_history_without_collectors_is_priced_by_the_models_it_names(sessions) -> None:  # type: ignore[no-untyped-def]
    with sessions.begin() as session:
        _import_inventory(session)
        result = import_sacct(session, SACCT.read_text().splitlines(), source="sacct", cluster="orion")
        assert result.jobs == 9 and not result.errors
        rollup(session, _pricing(CATALOG), to_epoch(datetime(2024, 5, 6, 12, tzinfo=UTC)))
    with sessions() as session:
        inventory = _models(session)
        ledger = session.execute(
            select(Gpu.model, func.sum(LedgerEntry.seconds))
            .join(Gpu, Gpu.id == LedgerEntry.gpu_id)
            .join(Job, Job.id == LedgerEntry.job_pk)
            .group_by(Gpu.model)
        ).all()
    got: dict[str, int] = defaultdict(int)
    for gpu_model, seconds in ledger:
        key = CATALOG.resolve(gpu_model)
        if key is not None:
            got[key] += int(seconds)
    expected: dict[str, int] = defaultdict(int)
    for job in parse_sacct(SACCT.read_text().splitlines(), source="sacct").jobs:
        assert job.start is not None and job.end is not None
        [node] = {inventory.get(n) for n in job.nodes}  # one model per job here
        key = CATALOG.resolve(job.gpu_type) if job.gpu_type else (CATALOG.resolve(node) if node else None)
        if key is not None:
            expected[key] += job.gpus * int((job.end - job.start) / timedelta(seconds=1))
    assert set(expected) == {"A100-SXM4-80GB", "H100-SXM-80GB", "L40S", "MI250X", "MI300X"}
    assert expected["A100-SXM4-80GB"] == (4 * 120 + 4 * 140) * 60
    assert expected["H100-SXM-80GB"] == (8 * 210 + 16 * 90) * 60
    assert dict(got) == dict(expected)


def test_an_import_is_stored_in_rounds_and_stops_at_its_node_bound(sessions, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    from finops.jobs import inventory

    monkeypatch.setattr(inventory, "IMPORT_CHUNK", 3)
    monkeypatch.setattr(inventory, "MAX_NODES_PER_IMPORT", 7)
    lines = [f"NodeName=gpu-{i:02d} Gres=gpu:h100:8 Partitions=gpu" for i in range(10)]
    lines[4] = "Gres=gpu:h100:8"  # no NodeName
    lines.insert(2, "")  # blank lines count for line numbers, not for the bound
    with sessions.begin() as session:
        result = import_nodes(session, iter(lines), source="nodes.txt", resolve=CATALOG.resolve, at=datetime.now(UTC))
        stored = sorted(session.scalars(select(Node.hostname)))
    assert [e.message for e in result.errors] == [
        "nodes.txt:6: no NodeName= field: not a line of scontrol show node --oneliner",
        "nodes.txt:9: more than 7 nodes in one import: this line and the rest were not read; import them in parts "
        "of at most 7 lines",
    ]
    assert result.nodes == 6 and stored == [f"gpu-{i:02d}" for i in (0, 1, 2, 3, 5, 6)]
    assert result.models_set == 6
