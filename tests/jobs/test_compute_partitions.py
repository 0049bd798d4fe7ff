"""AMD MI300X compute partitions on Slurm-only nodes (both databases): a GRES type ending in the partition mode
(``gpu:mi300x_cpx:64``), or a type named by ``--compute-partition`` (``mi300x=cpx``), gives the node one GPU per
partition, each billed as its share of an MI300X; eight packages in CPX mode cost what eight MI300X cost, not
64. The scontrol and sacct lines are written by hand in the format of the fixtures beside them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from finops.db.ledger_tables import LedgerEntry
from finops.db.models import Gpu, Job, Node
from finops.jobs.compute_partitions import gres_gpu_name, gres_partition, parse_modes, with_modes
from finops.jobs.inventory import InventoryError, import_nodes, set_model
from finops.jobs.slurm_import import import_sacct
from finops.ledger.rollup import rollup
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.timeutil import to_epoch

CATALOG = load_catalog()
PRICING = Pricing(CATALOG, PricingModel.ON_DEMAND)
T = datetime(2026, 10, 4, 0, 0, tzinfo=UTC)
CPX = "MI300X (CPX partition 1/8)"
"""The model of an MI300X CPX partition; the catalogue's MI300X is $6.00 an hour on demand, a partition $0.75."""


def node(name: str, gres: str) -> str:
    """A line of ``scontrol show node --oneliner`` (fields as in tests/fixtures/scontrol)."""
    return (
        f"NodeName={name} Arch=x86_64 CoresPerSocket=48 CPUAlloc=0 CPUTot=192 Gres={gres}(S:0-1) NodeAddr={name} "
        f"Partitions=amd State=IDLE Version=24.05.4"
    )


def job(job_id: int, gres: str, count: int, host: str) -> str:
    """A sacct line (tests/fixtures/sacct's format) of a job holding ``count`` GPUs of ``gres`` on ``host`` over
    [T, T + 1 h)."""
    start, end = T.strftime("%Y-%m-%dT%H:%M:%S"), (T + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S")
    tres = f"billing=8,cpu=8,gres/gpu:{gres}={count},gres/gpu={count},mem=64G,node=1"
    return f"{job_id}|{job_id}|orion|amd|physics|dave|{start}|{start}|{end}|01:00:00|COMPLETED|{tres}|{host}|train"


def hour_costs(session: Session) -> dict[str, tuple[Decimal, int]]:
    """Hostname -> (the hour's allocated cost, GPUs) of [T, T + 1 h), after a rollup."""
    rollup(session, PRICING, to_epoch(T + timedelta(hours=1)))
    rows = session.execute(
        select(Node.hostname, func.sum(LedgerEntry.allocated_cost), func.count(func.distinct(LedgerEntry.gpu_id)))
        .join(Gpu, Gpu.id == LedgerEntry.gpu_id)
        .join(Node, Node.id == Gpu.node_id)
        .where(LedgerEntry.hour == T)
        .group_by(Node.hostname)
    ).all()
    return {hostname: (Decimal(cost), count) for hostname, cost, count in rows}


def test_gres_types_naming_a_partition_mode() -> None:
    assert gres_partition("mi300x_cpx") == ("mi300x", "cpx")
    assert gres_partition("MI300X-QPX") == ("MI300X", "qpx")
    assert gres_partition("mi300x") is None and gres_partition("a100_1g.5gb") is None and gres_partition(None) is None
    assert gres_partition("_cpx") is None, "a suffix alone names no board"
    assert gres_gpu_name("mi300x_dpx") == "mi300x (DPX partition 1/2)" and gres_gpu_name("h100") == "h100"
    assert parse_modes(["MI300X=CPX", "mi300a=dpx"]) == {"mi300x": "cpx", "mi300a": "dpx"}
    for bad in ("mi300x", "mi300x=spx", "=cpx", "mi300x=octo"):
        with pytest.raises(ValueError, match="GRES_TYPE=MODE"):
            parse_modes([bad])
    assert with_modes((("MI300X", 64), (None, 2), ("h100", 8)), {"mi300x": "cpx"}) == (
        ("MI300X_cpx", 64), (None, 2), ("h100", 8),
    )  # fmt: skip


def test_partitions_of_a_slurm_only_node_bill_as_their_share(sessions) -> None:  # type: ignore[no-untyped-def]
    lines = [
        node("cpx-01", "gpu:mi300x_cpx:64"), node("spx-01", "gpu:mi300x:8"), node("qpx-01", "gpu:mi300x_qpx:32"),
        node("tpx-01", "gpu:mi300x_tpx:24"),
    ]  # fmt: skip
    with sessions.begin() as session:
        result = import_nodes(session, lines, source="scontrol", resolve=CATALOG.resolve, at=T, cluster="orion")
        assert not result.errors and not result.unresolved
        assert result.capacity.gpus_created == 64 + 8 + 32 + 24
        models = dict(session.execute(select(Node.hostname, Node.gpu_model)).all())
        assert models == {
            "cpx-01": CPX, "spx-01": "MI300X", "qpx-01": "MI300X (QPX partition 1/4)",
            "tpx-01": "MI300X (TPX partition 1/3)",
        }  # fmt: skip
        sacct = [job(910001, "mi300x_cpx", 2, "cpx-01"), job(910002, "mi300x", 1, "spx-01")]
        assert not import_sacct(session, sacct, source="sacct", cluster="orion").errors
        costs = hour_costs(session)
        held = dict(
            session.execute(
                select(Job.job_id, func.sum(LedgerEntry.allocated_cost))
                .join(LedgerEntry, LedgerEntry.job_pk == Job.id)
                .group_by(Job.job_id)
            ).all()
        )
    # eight MI300X a node, at $6.00 an hour each, however they are partitioned
    assert costs == {
        "cpx-01": (Decimal("48.00"), 64),
        "spx-01": (Decimal("48.00"), 8),
        "qpx-01": (Decimal("48.00"), 32),
        "tpx-01": (Decimal("48.00"), 24),
    }
    assert Decimal(held["910001"]) == Decimal("1.50")  # two CPX partitions: 2/8 of an MI300X-hour
    assert Decimal(held["910002"]) == Decimal("6.00")


def test_the_mode_stated_at_import_for_a_fixed_gres_type(sessions) -> None:  # type: ignore[no-untyped-def]
    lines = [node("cpx-02", "gpu:mi300x:64")]
    with sessions.begin() as session:
        import_nodes(session, lines, source="scontrol", resolve=CATALOG.resolve, at=T, modes={"mi300x": "cpx"})
        assert session.scalar(select(Node.gpu_model)) == CPX
        assert set(session.scalars(select(Gpu.model))) == {CPX}
        assert hour_costs(session) == {"cpx-02": (Decimal("48.00"), 64)}


def test_a_partition_model_set_by_hand(sessions) -> None:  # type: ignore[no-untyped-def]
    choices = sorted(CATALOG.models)
    with sessions.begin() as session:
        import_nodes(session, [node("x-01", "gpu:32")], source="scontrol", resolve=CATALOG.resolve, at=T)
        key, hosts, changed = set_model(
            session, "mi300x_qpx", resolve=CATALOG.resolve, choices=choices, node="x-01", actor="test"
        )
        assert (key, hosts, changed) == ("MI300X (QPX partition 1/4)", ["x-01"], 32)
        with pytest.raises(InventoryError, match="'v100_cpx' is not a price catalog model"):
            set_model(session, "v100_cpx", resolve=CATALOG.resolve, choices=choices, node="x-01", actor="test")


def test_a_job_on_a_node_without_inventory_names_its_partitions(sessions) -> None:  # type: ignore[no-untyped-def]
    with sessions.begin() as session:
        assert not import_sacct(session, [job(910003, "mi300x_cpx", 4, "cpx-09")], source="s", cluster="o").errors
        assert set(session.scalars(select(Gpu.model))) == {"mi300x (CPX partition 1/8)"}
        assert hour_costs(session) == {"cpx-09": (Decimal("3.00"), 4)}  # 4 × 1/8 of $6.00
