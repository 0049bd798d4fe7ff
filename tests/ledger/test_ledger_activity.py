"""Hardware activity in the ledger: both costing paths (common GPU-hours in SQL, or every GPU-hour by the Python cost
model) write the same rows, activity columns included, on SQLite and PostgreSQL; the rows hold the hand-computed
profiled seconds, means and SM-active cost; the team-hours equal the ledger's sums.

The slice, one reading a minute over two hours [T, T+2h), activity values binary fractions (exact means):

- g0: one job holds it all along (common GPU-hours: costed in SQL); every other reading carries SM 0.75 and tensor
  0.5, no DRAM: a partially profiled holding (1800 of 3600 s);
- g1: two overlapping jobs (time-slicing) in the first hour, each taking the GPU's mean: SM 0.5 then 0.25 (0.375),
  DRAM 0.125, every reading profiled;
- g2: MIG shares 3/7 and 1/7; the first 30 readings of each hour carry SM 0.5 and tensor 0.25, the rest none;
- g3: two disjoint jobs in one hour, the first profiled (SM 0.625), the second not;
- g4: an A100 on spot pricing, which has no price: SM 0.5 measured, allocated and SM-active cost NULL;
- g5: held by no job, SM 0.875: the unallocated row has no activity.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.orm import Session, sessionmaker

from collector.contract.wire import ACTIVITY_COLUMNS
from finops.db.hours import mark_hours_dirty
from finops.db.ledger_tables import LedgerEntry, LedgerTeamHour, ProfiledHour
from finops.db.models import Gpu, GpuSample, Job, Node, PricingRule, Team
from finops.ingest.partitions import create_partitions, is_partitioned
from finops.ledger.costmodel import used_cost
from finops.ledger.rollup import rollup
from finops.ledger.sql import LEDGER_COLUMNS
from finops.ledger.team_hours import TEAM_ACTIVITIES
from finops.pricing.catalog import Pricing, PricingModel
from finops.timeutil import HOUR, from_epoch, to_epoch
from tests.ledger.test_ledger_paths import A100, H100, _catalog
from tests.support.holdings import hold

T0 = to_epoch(datetime(2026, 10, 5, tzinfo=UTC))
UNTIL = T0 + 2 * HOUR
MINUTE = 60


def _activity(kind: str, k: int) -> dict[str, float]:
    """The activity fields of reading ``k`` (minute k after T) of a GPU of ``kind``."""
    if kind == "g0":
        return {"sm_active_ratio": 0.75, "tensor_active_ratio": 0.5} if k % 2 == 0 else {}
    if kind == "g1":
        return {"sm_active_ratio": 0.5 if k % 60 < 30 else 0.25, "dram_active_ratio": 0.125}
    if kind == "g2":
        return {"sm_active_ratio": 0.5, "tensor_active_ratio": 0.25} if k % 60 < 30 else {}
    if kind == "g3":
        return {"sm_active_ratio": 0.625} if k < 30 else {}
    if kind == "g4":
        return {"sm_active_ratio": 0.5}
    return {"sm_active_ratio": 0.875}


def _build(session: Session) -> None:
    alpha, beta = Team(name="alpha"), Team(name="beta")
    n1, spot = Node(hostname="n1"), Node(hostname="n-spot")
    session.add_all([alpha, beta, n1, spot])
    session.flush()
    session.add(PricingRule(selector="node", key="", value="n-spot", pricing_model="spot"))
    since = from_epoch(T0 - 3 * HOUR)
    gpus = {
        kind: Gpu(uuid=f"GPU-{kind}", node_id=(spot if kind == "g4" else n1).id, gpu_index=i, model=model,
                  in_service_from=since)
        for i, (kind, model) in enumerate([("g0", H100), ("g1", H100), ("g2", H100), ("g3", H100), ("g4", A100),
                                           ("g5", H100)])
    }  # fmt: skip
    session.add_all(gpus.values())
    session.flush()

    def job(name: str, team: Team, gpu: str, start: int, end: int | None, share: tuple[int, int] = (1, 1)) -> None:
        hold(session, team, gpus[gpu].id, name, start, end, share)

    job("A", alpha, "g0", T0 - HOUR, None)
    job("B", alpha, "g1", T0, T0 + 40 * MINUTE)
    job("C", beta, "g1", T0 + 20 * MINUTE, T0 + HOUR)
    job("D", alpha, "g2", T0, UNTIL, (3, 7))
    job("E", beta, "g2", T0 + 30 * MINUTE, UNTIL, (1, 7))
    job("F", alpha, "g3", T0, T0 + 30 * MINUTE)
    job("G", beta, "g3", T0 + 30 * MINUTE, T0 + HOUR)
    job("H", alpha, "g4", T0 - HOUR, None)
    samples = [
        {"gpu_id": gpu.id, "ts": T0 + k * MINUTE + 7, "utilization_ratio": 0.5, "energy_joules": 1000.0 * k,
         **dict.fromkeys(ACTIVITY_COLUMNS), **_activity(kind, k)}
        for kind, gpu in gpus.items()
        for k in range(120)
    ]  # fmt: skip
    if is_partitioned(session.connection()):
        create_partitions(session.connection(), {sample["ts"] for sample in samples})
    session.execute(GpuSample.__table__.insert(), samples)  # type: ignore[attr-defined]
    mark_hours_dirty(session, range(T0 - HOUR, UNTIL, HOUR))
    # What ingest does for readings that carry activity: the metering reads activity in these hours.
    session.execute(ProfiledHour.__table__.insert(), [{"hour": h} for h in range(T0 - HOUR, UNTIL, HOUR)])  # type: ignore[attr-defined]


def _ledger(session: Session) -> list[dict[str, Any]]:
    """Every ledger row as {column: value} plus ``job`` (name) and ``gpu`` (uuid), by hour, GPU and job."""
    table = LedgerEntry.__table__
    rows = session.execute(
        select(*(table.c[name] for name in LEDGER_COLUMNS), Job.name.label("job"), Gpu.uuid.label("gpu"))
        .join(Gpu, Gpu.id == table.c.gpu_id)
        .outerjoin(Job, Job.id == table.c.job_pk)
    ).all()
    return sorted((dict(row._mapping) for row in rows), key=lambda r: (r["hour"], r["gpu_id"], r["job"] or ""))


def _rolled_up(sessions: sessionmaker[Session], sql_costing: bool) -> tuple[list[dict[str, Any]], list[Any]]:
    pricing = Pricing(_catalog(), PricingModel.ON_DEMAND)
    with sessions.begin() as session:
        session.execute(text("DELETE FROM ledger_team_hours"))
        session.execute(text("DELETE FROM ledger"))
        mark_hours_dirty(session, range(T0 - HOUR, UNTIL, HOUR))
        rollup(session, pricing, UNTIL, sql_costing=sql_costing)
    with sessions() as session:
        team_hours = session.execute(
            select(LedgerTeamHour).order_by(LedgerTeamHour.hour, LedgerTeamHour.team_id)
        ).scalars()
        return _ledger(session), [_team_hour(row) for row in team_hours]


def _team_hour(row: LedgerTeamHour) -> tuple[Any, ...]:
    names = ["profiled_gpu_seconds", "sm_active_cost"]
    for name in TEAM_ACTIVITIES:
        names += [f"{name}_gpu_seconds", f"{name}_measured_gpu_seconds"]
    return (to_epoch(row.hour), row.team_id, *(getattr(row, name) for name in names))


def test_both_costing_paths_write_the_hand_computed_activity(sessions: sessionmaker[Session]) -> None:
    with sessions.begin() as session:
        _build(session)
    in_sql, in_sql_team_hours = _rolled_up(sessions, sql_costing=True)
    in_python, in_python_team_hours = _rolled_up(sessions, sql_costing=False)
    assert len(in_sql) == len(in_python) > 10
    for fast, reference in zip(in_sql, in_python, strict=True):
        assert fast == reference
    assert in_sql_team_hours == in_python_team_hours

    rows: dict[tuple[int, str, str | None], dict[str, Any]] = {}
    for row in in_sql:
        rows[to_epoch(row["hour"]) - T0, row["gpu"].removeprefix("GPU-"), row["job"]] = row
    h1 = HOUR

    def check(key: tuple[int, str, str | None], profiled: int, sm: float | None, tensor: float | None,
              dram: float | None) -> None:  # fmt: skip
        row = rows[key]
        assert (row["profiled_seconds"], row["sm_active_ratio"], row["tensor_active_ratio"],
                row["dram_active_ratio"]) == (profiled, sm, tensor, dram), key  # fmt: skip

    for hour in (0, h1):  # a partially profiled whole-GPU holding, costed in SQL
        check((hour, "g0", "A"), 1800, 0.75, 0.5, None)
    for name in ("B", "C"):  # time-sliced: each holder gets the GPU's mean, all its seconds profiled
        check((0, "g1", name), rows[0, "g1", name]["seconds"], 0.375, None, 0.125)
    for hour, name in (
        (0, "D"),
        (0, "E"),
        (h1, "D"),
        (h1, "E"),
    ):  # MIG shares of a half-profiled GPU-hour: half their seconds, rounded up
        seconds = rows[hour, "g2", name]["seconds"]
        assert seconds == round(Fraction(3 if name == "D" else 1, 7) * (3600 if hour or name == "D" else 1800))
        check((hour, "g2", name), -(-seconds // 2), 0.5, 0.25, None)
    check((0, "g3", "F"), 1800, 0.625, None, None)
    check((0, "g3", "G"), 0, None, None, None)  # held, not profiled: NULL, never 0
    check((0, "g4", "H"), 3600, 0.5, None, None)
    assert rows[0, "g4", "H"]["allocated_cost"] is None and rows[0, "g4", "H"]["sm_active_cost"] is None  # unpriced
    for hour in (0, h1):
        check((hour, "g5", None), 0, None, None, None)  # unallocated capacity has no activity
    for row in in_sql:  # SM-active cost = allocated × SM activity, exact to the micro-unit, NULL where either is
        sm, allocated = row["sm_active_ratio"], row["allocated_cost"]
        expected = used_cost(allocated, sm) if sm is not None and allocated is not None else None
        assert row["sm_active_cost"] == expected, row
        if row["job"] is None:
            assert all(row[f"{a}_ratio"] is None for a in TEAM_ACTIVITIES) and row["profiled_seconds"] == 0
    assert rows[0, "g0", "A"]["sm_active_cost"] == Decimal("0.750001")  # 1.000001 × 0.75 = 0.75000075, half-even

    assert in_sql_team_hours == _team_sums(in_sql)


def _team_sums(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """The team-hours' activity columns summed from ledger rows in Python: profiled seconds, SM-active cost (None
    when no row has one), per activity Σ profiled × mean (None when none measured it) and measured seconds."""
    groups: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[to_epoch(row["hour"]), row["team_id"]].append(row)
    sums = []
    for (hour, team), group in sorted(groups.items()):
        costs = [row["sm_active_cost"] for row in group if row["sm_active_cost"] is not None]
        found: list[Any] = [sum(row["profiled_seconds"] for row in group), sum(costs) if costs else None]
        for name in TEAM_ACTIVITIES:
            measured = [row for row in group if row[f"{name}_ratio"] is not None]
            total = sum(row["profiled_seconds"] * row[f"{name}_ratio"] for row in measured) if measured else None
            found += [total, sum(row["profiled_seconds"] for row in measured)]
        sums.append((hour, team, *found))
    return sums
