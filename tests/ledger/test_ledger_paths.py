"""The ledger's SQL costing against its Python cost model, row for row, on SQLite and PostgreSQL.

A seeded random cluster slice is built directly in the tables and rolled up twice: with the common GPU-hours
costed in SQL (the default) and with every GPU-hour costed by :func:`finops.ledger.costmodel.gpu_hour_costs`. The two
ledgers must be identical, floats and micro-units included. The slice has in-service starts and a build time
inside an hour, jobs starting and ending mid-hour and on the hour, MIG shares (1/7, 3/7), overlapping whole-GPU
allocations (time-slicing), open allocations, holdings without readings, readings without utilisation,
collector gaps longer than the energy lookback, counter resets, four pricing models chosen by pricing rules,
a GPU model without a price, rates, utilisations and energies that put many amounts exactly halfway
between two micro-units (half-even rounding matters), and readings with and without hardware activity fields.
"""

from __future__ import annotations

import logging
import random
import threading
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import select, text
from sqlalchemy.orm import Session, sessionmaker

from collector.contract.wire import ACTIVITY_COLUMNS
from finops.db.hours import mark_hours_dirty
from finops.db.ledger_tables import LedgerEntry, ProfiledHour, TsdbGpuMetering
from finops.db.models import UNALLOCATED_TEAM, Allocation, Gpu, GpuSample, Job, Node, PricingRule, Team
from finops.ingest.partitions import create_partitions, is_partitioned
from finops.jobs.teams import team_by_name
from finops.ledger import rollup as ledger
from finops.ledger.costmodel import float_decimal
from finops.ledger.metering import ENERGY_LOOKBACK_SECONDS, ENERGY_SCALE, RATIO_SCALE
from finops.ledger.rollup import rollup
from finops.ledger.rollup_result import ChunkBuilt
from finops.ledger.sql import LEDGER_COLUMNS
from finops.pricing.catalog import PriceCatalog, Pricing, PricingModel
from finops.timeutil import HOUR, floor_hour, from_epoch, to_epoch

T0 = to_epoch(datetime(2026, 10, 5, tzinfo=UTC))
HOURS = 7
UNTIL = T0 + HOURS * HOUR + 23 * 60  # the build time falls inside the last hour
H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"
SOURCE = {"url": "https://example.org/prices", "note": "test figures"}


def _catalog() -> PriceCatalog:
    """H100 at 1.000001 on demand (× a mean utilisation of 0.5 = 0.5000005: a tie), odd reserved and spot rates,
    on-prem from parts (a 28-digit rate); A100 only on demand. Energy at 0.36 per kWh and PUE 1 costs 1e-7 per
    joule, so a GPU-hour of 5 J (mod 10) costs exactly half a micro-unit more than a whole number of them."""

    def rate(model: str, value: str) -> dict[str, Any]:
        return {"pricing_model": model, "effective_from": "2026-01-01", "rate": Decimal(value), "sources": [SOURCE]}

    onprem = {
        "pricing_model": "on-prem",
        "effective_from": "2026-01-01",
        "capex_usd": Decimal(27500),
        "amortisation_years": Decimal(5),
        "board_power_watts": Decimal(700),
        "support_per_year_usd": Decimal(4500),
        "sources": [SOURCE],
    }
    return PriceCatalog.model_validate(
        {
            "currency": "USD",
            "tariff_per_kwh": Decimal("0.36"),
            "tariff_source": SOURCE,
            "pue": Decimal(1),
            "pue_source": SOURCE,
            "models": {
                "H100": {
                    "description": "H100",
                    "match": [r"\bH100\b"],
                    "prices": [
                        rate("on-demand", "1.000001"),
                        rate("reserved", "2.4637515"),
                        rate("spot", "0.33333333"),
                        onprem,
                    ],
                },
                "A100": {"description": "A100", "match": [r"\bA100\b"], "prices": [rate("on-demand", "3.43088125")]},
            },
        }
    )


def _readings(rng: random.Random, gpu_id: int, start: int, kind: str) -> list[dict[str, Any]]:
    """One reading a minute from ``start`` to the build time, shaped by ``kind``, with hardware activity from an RNG of
    its own (so the slice's readings and jobs do not depend on it)."""
    rows = []
    profiling = random.Random(gpu_id * 100_003 + start)
    energy = rng.choice([0.0, 1e9 + 0.1, 123456.7])
    for ts in range(start + rng.randrange(60), UNTIL, 60):
        if kind == "gappy" and T0 + HOUR <= ts < T0 + 2 * HOUR + 1800:  # a 90-minute collector outage
            continue
        if kind == "holes" and T0 + 3 * HOUR <= ts < T0 + 3 * HOUR + 2400:  # jobs here hold the GPU unmetered
            continue
        if kind == "tie":
            utilization: float | None = 0.5
            energy += 5 * rng.randrange(1, 4)  # whole multiples of 5 J: half-micro-unit energy costs
        else:
            utilization = rng.choice([0.0, 0.5, rng.randrange(101) / 100, rng.random(), None])
            energy += rng.choice([5 * rng.randrange(1000, 8000), rng.uniform(0, 40000), 0.1 * rng.randrange(10**6)])
        if rng.random() < 0.01:
            energy = rng.uniform(0, 1000)  # counter reset (driver reload)
        rows.append(
            {
                "gpu_id": gpu_id,
                "ts": ts,
                "utilization_ratio": utilization,
                "energy_joules": None if rng.random() < 0.02 else energy,
                **_activity(profiling),
            }
        )
    return rows


def _activity(rng: random.Random) -> dict[str, float | None]:
    """A reading's hardware activity fields: none at all a third of the time (an unprofiled reading), else each
    field present or not, with a value that is a tie, a round ratio or any float."""
    if rng.random() < 0.33:
        return dict.fromkeys(ACTIVITY_COLUMNS)
    return {
        name: None if rng.random() < 0.2 else rng.choice([0.5, rng.randrange(101) / 100, rng.random()])
        for name in ACTIVITY_COLUMNS
    }


def _build(session: Session, seed: int) -> None:
    """The seeded slice (module docstring): 4 nodes, 14 GPUs, random jobs."""
    rng = random.Random(seed)
    teams = [Team(name=name) for name in ("alpha", "beta", "__unmapped__")]
    session.add_all(teams)
    nodes = [
        Node(hostname="n-default"),
        Node(hostname="n-reserved", partition="res"),
        Node(hostname="n-onprem", labels={"site": "basement"}),
        Node(hostname="n-spot"),
    ]
    session.add_all(nodes)
    session.flush()
    session.add_all(
        [
            PricingRule(selector="partition", key="", value="res", pricing_model="reserved"),
            PricingRule(selector="node_label", key="site", value="basement", pricing_model="on-prem"),
            PricingRule(selector="node", key="", value="n-spot", pricing_model="spot"),
        ]
    )
    kinds = ["idle", "whole", "tie", "gappy", "holes", "random", "random", "random", "mig", "sliced", "random"]
    placed: list[tuple[int, str, str, int, int]] = []  # (node, model, kind, GPU index, in service from)
    for index, kind in enumerate(kinds):
        late = kind == "random" and index % 2 == 0  # enters service mid-hour
        node = nodes[index % 4].id if kind not in ("idle", "whole", "tie") else nodes[0].id
        placed.append((node, H100, kind, index, T0 + HOUR + 17 * 60 + 11 if late else T0 - 3 * HOUR))
    placed.append((nodes[2].id, A100, "random", 90, T0))  # on-prem pricing: no price
    placed.append((nodes[0].id, A100, "random", 91, T0))
    placed.append((nodes[0].id, H100, "idle", 92, UNTIL + 1))  # enters service after the build time
    gpus = [
        (Gpu(uuid=f"GPU-{i}", node_id=node, gpu_index=i, model=model, in_service_from=from_epoch(entered)), kind)
        for node, model, kind, i, entered in placed
    ]
    session.add_all([gpu for gpu, _ in gpus])
    session.flush()
    jobs: list[Job] = []

    def job(gpu: Gpu, start: int, end: int | None, share: tuple[int, int] = (1, 1)) -> None:
        record = Job(
            scheduler="slurm",
            cluster="c",
            job_id=str(len(jobs) + 100),
            job_id_raw=str(len(jobs) + 100),
            user="u",
            account="a",
            partition="p",
            name="j",
            state="RUNNING" if end is None else "COMPLETED",
            start=from_epoch(start),
            end=None if end is None else from_epoch(end),
            gpus=1,
            node_list="n",
            team_id=rng.choice(teams).id,
        )
        jobs.append(record)
        session.add(record)
        session.flush()
        profile = {1: "1g.10gb", 3: "3g.40gb"}.get(share[0]) if share != (1, 1) else None
        session.add(
            Allocation(
                job_pk=record.id, gpu_id=gpu.id, start=from_epoch(start), end=None if end is None else from_epoch(end),
                share_num=share[0], share_den=share[1], mig_profile=profile,
            )
        )  # fmt: skip

    samples: list[dict[str, Any]] = []
    for gpu, kind in gpus:
        entered = to_epoch(gpu.in_service_from)
        if entered < UNTIL:
            samples += _readings(rng, gpu.id, max(entered, T0 - HOUR), kind)
        if kind in ("whole", "tie"):
            job(gpu, T0 - HOUR, None)  # held all along: common GPU-hours costed in SQL
        elif kind == "mig":
            for share in ((3, 7), (3, 7), (1, 7)):
                at = T0 + rng.randrange(-2, 4) * HOUR + rng.choice([0, 600, 1337])
                job(gpu, at, at + rng.randrange(1, 6) * HOUR + rng.choice([0, 907]), share)
        elif kind == "sliced":
            job(gpu, T0 - HOUR, T0 + HOUR + 1800)
            job(gpu, T0 + HOUR + 1200, T0 + HOUR + 2400)  # overlaps the first, yet together they fill 50 minutes
            job(gpu, T0 + 2 * HOUR, T0 + 5 * HOUR)
            job(gpu, T0 + 3 * HOUR + 600, None)  # overlaps the third: more than the hour is held
        elif kind != "idle":
            at = max(entered, T0 - 2 * HOUR)
            while at < UNTIL + HOUR:
                length = rng.choice([HOUR, 2 * HOUR, rng.randrange(60, 3 * HOUR)])
                end = at + length if rng.random() < 0.9 else None
                job(gpu, at, end)
                if end is None:
                    break
                at = end + rng.choice([0, 0, HOUR - end % HOUR, rng.randrange(1, 5000)])
    if is_partitioned(session.connection()):
        create_partitions(session.connection(), {sample["ts"] for sample in samples})
    session.execute(GpuSample.__table__.insert(), samples)  # type: ignore[attr-defined]
    mark_hours_dirty(session, range(T0 - 3 * HOUR, UNTIL, HOUR))
    # What ingest does for readings that carry activity: the metering reads activity in these hours.
    session.execute(ProfiledHour.__table__.insert(), [{"hour": h} for h in range(T0 - 3 * HOUR, UNTIL, HOUR)])  # type: ignore[attr-defined]


def _ledger(session: Session) -> list[tuple[Any, ...]]:
    """Every ledger row's columns (money as Decimal), by hour, GPU and job."""
    table = LedgerEntry.__table__
    rows = session.execute(select(*(table.c[name] for name in LEDGER_COLUMNS))).all()
    return sorted((tuple(row) for row in rows), key=lambda row: (row[0], row[1], row[2] or 0))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sql_costing_matches_the_python_cost_model(
    sessions: sessionmaker[Session], seed: int, caplog: pytest.LogCaptureFixture
) -> None:
    pricing = Pricing(_catalog(), PricingModel.ON_DEMAND)
    with sessions.begin() as session:
        _build(session, seed)
    with sessions.begin() as session, caplog.at_level(logging.DEBUG, logger="finops.ledger.rollup"):
        rollup(session, pricing, UNTIL)
    counts = [record.args for record in caplog.records if str(record.msg).startswith("ledger hours")]
    in_sql = sum(int(str(args[2])) for args in counts if isinstance(args, tuple))
    split = sum(int(str(args[3])) for args in counts if isinstance(args, tuple))
    assert in_sql >= 20 and split >= 20  # both paths did real work
    with sessions() as session:
        fast = _ledger(session)
        dirty = sorted(session.scalars(text("SELECT hour FROM ledger_dirty_hours")))
    with sessions.begin() as session:
        session.execute(text("DELETE FROM ledger"))
        mark_hours_dirty(session, range(T0 - 3 * HOUR, UNTIL, HOUR))  # as the slice started
        rollup(session, pricing, UNTIL, sql_costing=False)
    with sessions() as session:
        reference = _ledger(session)
        assert sorted(session.scalars(text("SELECT hour FROM ledger_dirty_hours"))) == dirty
    assert dirty == [floor_hour(UNTIL - 1)]  # the newest hour keeps its mark; the unpriced hours are built
    unpriced = [row for row in reference if row[LEDGER_COLUMNS.index("allocated_cost")] is None]
    assert unpriced  # the A100 on on-prem pricing has no price: its rows are kept unpriced, by both paths
    assert all(row[LEDGER_COLUMNS.index("used_cost")] is None for row in unpriced)
    assert len(fast) == len(reference) > 0
    for fast_row, reference_row in zip(fast, reference, strict=True):
        assert fast_row == reference_row
    ties = [row for row in reference if row[LEDGER_COLUMNS.index("used_cost")] == Decimal("0.500000")]
    assert ties  # 1.000001 × 0.5 = 0.5000005 rounded half-even, not up to 0.500001
    profiled, seconds = LEDGER_COLUMNS.index("profiled_seconds"), LEDGER_COLUMNS.index("seconds")
    partly = [row for row in reference if 0 < row[profiled] < row[seconds]]
    measured = [row for row in reference if row[LEDGER_COLUMNS.index("sm_active_cost")] is not None]
    assert len(partly) > 20 and len(measured) > 20  # the activity columns were compared where they hold values


def test_postgresql_float_text_is_the_python_repr(sessions: sessionmaker[Session]) -> None:
    """The SQL costing reads a float reading as ``CAST(CAST(x AS text) AS numeric)``; that must be the decimal of
    Python's ``repr`` (shortest round-trip digits) that :func:`finops.ledger.costmodel.float_decimal` uses."""
    with sessions() as session:
        if session.get_bind().dialect.name != "postgresql":
            pytest.skip("SQLite costs float readings through registered Python functions")
        rng = random.Random(7)
        values = [rng.random() for _ in range(3000)]
        values += [rng.randrange(101) / 100 for _ in range(500)]
        values += [rng.uniform(0, 5e9) for _ in range(3000)]
        values += [sum(rng.random() for _ in range(rng.randrange(1, 60))) / rng.randrange(1, 60) for _ in range(3000)]
        values += [rng.uniform(0, 1) * 10.0 ** rng.randrange(-320, 300) for _ in range(1000)]
        values += [0.0, 1.0, 0.5, 1e-05, 5e-324, 1.7976931348623157e308, 0.1 + 0.2, 123456789012345680.0]
        rows = session.execute(
            text("SELECT x, CAST(CAST(x AS text) AS numeric) FROM unnest(CAST(:xs AS double precision[])) AS x"),
            {"xs": values},
        ).all()
    assert len(rows) == len(values)
    for value, decimal in rows:
        assert decimal == float_decimal(value), value


def _reference_metering(session: Session, h0: int, end: int) -> dict[tuple[int, int, int | None], tuple[Any, ...]]:
    """The metering of [h0, end) computed from the readings in Python: per GPU in time order, each reading's energy
    increment from the last one before it that has a counter value (none over more than the lookback, the new
    reading after a reset), summed in that order per GPU, hour and the non-shared holding that contains the
    reading (else None)."""
    holdings: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
    for gpu_id, hour, allocation_id, start, stop in session.execute(
        text("SELECT gpu_id, hour, allocation_id, start, stop FROM tmp_ledger_holdings WHERE shared = 0")
    ):
        holdings.setdefault((gpu_id, hour), []).append((allocation_id, start, stop))
    readings = session.execute(
        select(GpuSample.gpu_id, GpuSample.ts, GpuSample.utilization_ratio, GpuSample.energy_joules)
        .where(GpuSample.ts >= from_epoch(h0 - ENERGY_LOOKBACK_SECONDS), GpuSample.ts < from_epoch(end))
        .order_by(GpuSample.gpu_id, GpuSample.ts)
    ).all()
    sums: dict[tuple[int, int, int | None], list[Any]] = {}
    previous: tuple[int, int, float] | None = None  # the last reading with a counter value
    for gpu_id, at, utilization, energy in readings:
        ts = to_epoch(at)
        before = previous if previous is not None and previous[0] == gpu_id else None
        if energy is not None:
            previous = (gpu_id, ts, energy)
        if ts < h0:
            continue
        if energy is None or before is None or ts - before[1] > ENERGY_LOOKBACK_SECONDS:
            increment = 0.0
        else:
            increment = energy if energy < before[2] else energy - before[2]
        hour = ts - ts % HOUR
        holder = next((a for a, start, stop in holdings.get((gpu_id, hour), []) if start <= ts < stop), None)
        group = sums.setdefault((gpu_id, hour, holder), [0, 0.0, 0.0])
        if utilization is not None:
            group[0] += 1
            group[1] += utilization
        group[2] += increment
    return {key: tuple(value) for key, value in sums.items()}


@pytest.mark.parametrize("seed", [1, 4])
def test_metering_matches_the_readings(
    sessions: sessionmaker[Session], seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every chunk's metering (3-hour chunks here, so that chunks start with readings before them) equals the
    readings summed in Python, up to the fixed point of the kept sums: each reading's utilisation rounded down to a
    multiple of 2^-40, each energy increment to one of 2^-20 J (:mod:`finops.ledger.metering`)."""
    pricing = Pricing(_catalog(), PricingModel.ON_DEMAND)
    with sessions.begin() as session:
        _build(session, seed)
    checked: list[int] = []
    real_rebuild = ledger.rebuild

    def rebuild_and_check(session: Session, h0: int, h1: int, *args: Any, **kwargs: Any) -> ChunkBuilt:
        built = real_rebuild(session, h0, h1, *args, **kwargs)
        end = min(h1, UNTIL)
        metered = {
            (gpu_id, hour, allocation_id): (samples, utilization, energy)
            for gpu_id, hour, allocation_id, samples, utilization, energy in session.execute(
                text("SELECT gpu_id, hour, allocation_id, samples, utilization_sum, energy_joules "
                     "FROM tmp_ledger_metering")
            )
        }  # fmt: skip
        reference = _reference_metering(session, h0, end)
        assert metered.keys() == reference.keys()
        for key, (samples, utilization, energy) in reference.items():
            assert metered[key][0] == samples
            assert utilization - samples / RATIO_SCALE <= metered[key][1] <= utilization + 1e-9
            assert (
                energy - 3601 / ENERGY_SCALE - 1e-6 <= metered[key][2] <= energy + 1e-6
            )  # one reading a second at most
        checked.append(len(reference))
        return built

    monkeypatch.setattr(ledger, "CHUNK_HOURS", 3)
    monkeypatch.setattr(ledger, "rebuild", rebuild_and_check)
    with sessions.begin() as session:
        rollup(session, pricing, UNTIL, connections=1)  # chunk by chunk in this session, where the check reads
    assert len(checked) >= 3 and min(checked) > 0


@pytest.mark.parametrize("seed", [2, 3])
def test_chunks_computed_on_other_connections_match(
    sessions: sessionmaker[Session], seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rollup whose chunks are computed on other connections (PostgreSQL) writes the same ledger, team-hours and
    dirty hours as one that computes them chunk by chunk in its own session. One whose transaction has already
    written its inputs computes in its own session, where those writes are visible."""
    pricing = Pricing(_catalog(), PricingModel.ON_DEMAND)
    monkeypatch.setattr(ledger, "CHUNK_HOURS", 3)
    with sessions.begin() as session:
        _build(session, seed)

    def rolled_up(session: Session, connections: int) -> tuple[Any, ...]:
        rollup(session, pricing, UNTIL, connections=connections)
        dirty = sorted(session.scalars(text("SELECT hour FROM ledger_dirty_hours")))
        return _ledger(session), _team_hours(session), dirty

    def start_afresh(session: Session) -> None:
        session.execute(text("DELETE FROM ledger_team_hours"))
        session.execute(text("DELETE FROM ledger"))
        mark_hours_dirty(session, range(T0 - 3 * HOUR, UNTIL, HOUR))

    with sessions.begin() as session:
        serial = rolled_up(session, 1)
    with sessions.begin() as session:
        start_afresh(session)
    with sessions.begin() as session:
        _assert_same(rolled_up(session, 3), serial)
    assert len(serial[0]) > 100 and serial[2]

    beta = text("UPDATE jobs SET team_id = (SELECT id FROM teams WHERE name = 'beta')")
    moved = []
    for connections in (1, 3):
        with sessions() as session:
            start_afresh(session)
            session.execute(beta)  # uncommitted: only this transaction sees it
            moved.append(rolled_up(session, connections))
            session.rollback()
    _assert_same(moved[1], moved[0])
    assert moved[0][0] != serial[0]
    with sessions() as session:
        beta_id = session.scalar(select(Team.id).where(Team.name == "beta"))
    job, team = LEDGER_COLUMNS.index("job_pk"), LEDGER_COLUMNS.index("team_id")
    assert {row[team] for row in moved[1][0] if row[job] is not None} == {beta_id}


def test_segments_a_meter_writes_are_seen_by_every_chunk(
    sessions: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rollup metered from a TSDB writes the hours' segments in its own transaction before it rebuilds them
    (``meter``); connections of their own would not see them, so every chunk is computed where they are: every hour
    is metered from its segments, and the ledger is the same with any number of connections."""
    monkeypatch.setattr(ledger, "CHUNK_HOURS", 3)
    with sessions.begin() as session:
        _build(session, 2)
        team_by_name(session, UNALLOCATED_TEAM)  # committed, so that both rollups bill the same team id
    pricing = Pricing(_catalog(), PricingModel.ON_DEMAND)

    def meter(session: Session, hours: Any, until: int) -> None:
        """One whole-hour segment per GPU and hour: 60 samples at 0.5, 3,600 J (as TsdbMeter.meter_hours writes)."""
        for gpu_id in session.scalars(select(Gpu.id)):
            for hour in hours:
                stop = min(hour + HOUR, until)
                segment = {"start": from_epoch(hour), "stop": from_epoch(stop), "memory_max_bytes": None}
                session.add(
                    TsdbGpuMetering(gpu_id=gpu_id, samples=60, utilization_sum=30.0, energy_joules=3600.0, **segment)
                )
        session.flush()

    built = []
    for connections in (1, 3):
        with sessions() as session:
            session.execute(text("DELETE FROM tsdb_gpu_metering"))
            mark_hours_dirty(session, range(T0 - 3 * HOUR, UNTIL, HOUR))
            session.commit()
            rollup(session, pricing, UNTIL, connections=connections, meter=meter)
            built.append((_ledger(session), _team_hours(session), []))
            session.rollback()
    samples = LEDGER_COLUMNS.index("sample_count")
    assert {to_epoch(row[0]) for row in built[0][0] if row[samples] > 0} == set(range(T0 - 3 * HOUR, UNTIL, HOUR))
    _assert_same(built[1], built[0])


def _assert_same(built: tuple[Any, ...], reference: tuple[Any, ...]) -> None:
    """Ledgers, team-hours and dirty hours equal, floats up to the order the database adds them in (plans differ
    between runs as statistics change), and so money computed from them up to a micro-unit."""
    assert built[2] == reference[2]
    for rows, expected in zip(built[:2], reference[:2], strict=True):
        assert len(rows) == len(expected)
        for row, want in zip(rows, expected, strict=True):
            for value, wanted in zip(row, want, strict=True):
                if isinstance(value, float):
                    assert value == pytest.approx(wanted, rel=1e-12, abs=1e-6)
                elif isinstance(value, Decimal):
                    assert abs(value - wanted) <= Decimal("0.000001")
                else:
                    assert value == wanted


def _team_hours(session: Session) -> list[tuple[Any, ...]]:
    return sorted(tuple(row) for row in session.execute(text("SELECT * FROM ledger_team_hours")))


def _slice_in_3_hour_chunks(
    sessions: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch, seed: int, why_not_sqlite: str | None
) -> Pricing:
    """The seeded slice, rolled up in 3-hour chunks; on SQLite skipped ``why_not_sqlite`` unless None."""
    monkeypatch.setattr(ledger, "CHUNK_HOURS", 3)
    with sessions.begin() as session:
        if why_not_sqlite is not None and session.get_bind().dialect.name != "postgresql":
            pytest.skip(why_not_sqlite)
        _build(session, seed)
    return Pricing(_catalog(), PricingModel.ON_DEMAND)


def test_a_failing_chunk_fails_the_rollup_and_returns_the_connections(
    sessions: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error while a helper connection computes a chunk is raised by the rollup, whose transaction then writes
    nothing; the helpers' connections go back to the pool."""
    pricing = _slice_in_3_hour_chunks(sessions, monkeypatch, 2, None)
    real_compute = ledger._compute

    def compute(session: Session, h0: int, *args: Any) -> ChunkBuilt:
        if h0 == T0 + 3 * HOUR:
            raise RuntimeError("chunk failed")
        return real_compute(session, h0, *args)

    monkeypatch.setattr(ledger, "_compute", compute)
    engine = sessions.kw["bind"]
    with pytest.raises(RuntimeError, match="chunk failed"), sessions.begin() as session:
        rollup(session, pricing, UNTIL, connections=2)
    assert engine.pool.checkedout() == 0
    with sessions() as session:
        assert session.scalar(text("SELECT count(*) FROM ledger")) == 0
        assert session.scalar(text("SELECT count(*) FROM ledger_dirty_hours")) == len(range(T0 - 3 * HOUR, UNTIL, HOUR))


def _mark_while_rebuilding(
    sessions: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch, hour: int, wait: float
) -> tuple[threading.Event, list[threading.Thread]]:
    """Make the computation of the (3-hour) chunk holding ``hour`` first start another transaction that marks
    ``hour`` dirty and commits, as an ingest or a job import does, and wait at most ``wait`` seconds for it.
    Returns the event set once that mark committed, and the writer thread once started."""
    marked = threading.Event()
    writers: list[threading.Thread] = []

    def mark_elsewhere() -> None:
        with sessions.begin() as other:
            mark_hours_dirty(other, [hour])
        marked.set()

    real_compute = ledger._compute

    def compute(session: Session, h0: int, *args: Any) -> ChunkBuilt:
        if h0 <= hour < h0 + 3 * HOUR:
            writers.append(threading.Thread(target=mark_elsewhere))
            writers[-1].start()
            writers[-1].join(timeout=wait)
        return real_compute(session, h0, *args)

    monkeypatch.setattr(ledger, "_compute", compute)
    return marked, writers


@pytest.mark.parametrize("connections", [1, 3])
def test_an_hour_marked_during_its_rebuild_stays_dirty(
    sessions: sessionmaker[Session], connections: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Data committed while its hour is being rebuilt (here a mark from another transaction, as an ingest or a job
    import makes) leaves the hour dirty after the rollup, so the next rollup reads that data. On PostgreSQL the
    other transaction's mark waits for the rollup's transaction, which removed the mark before reading the hour."""
    pricing = _slice_in_3_hour_chunks(
        sessions, monkeypatch, 3, "SQLite's rollup holds the database's write lock: nothing commits during it"
    )
    hour = T0 + 4 * HOUR
    marked, writers = _mark_while_rebuilding(sessions, monkeypatch, hour, wait=2)  # the mark waits for the rollup
    with sessions.begin() as session:
        rollup(session, pricing, UNTIL, connections=connections)
        assert not marked.is_set()
    for writer in writers:
        writer.join(timeout=30)
    assert marked.is_set()
    with sessions() as session:
        dirty = set(session.scalars(text("SELECT hour FROM ledger_dirty_hours")))
    assert hour in dirty


@pytest.mark.parametrize("connections", [1, 3])
def test_marking_the_newest_hour_does_not_wait_for_the_rollup(
    sessions: sessionmaker[Session], connections: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The newest hour built keeps its dirty mark through the rollup, so another transaction marking it (every
    ingest of the current hour does) commits at once instead of waiting for the rollup's transaction to end; the
    hour is still dirty afterwards, for the next rollup."""
    pricing = _slice_in_3_hour_chunks(
        sessions, monkeypatch, 3, "SQLite's rollup holds the database's write lock: nothing commits during it"
    )
    newest = floor_hour(UNTIL - 1)
    marked, _ = _mark_while_rebuilding(sessions, monkeypatch, newest, wait=5)  # a removed mark would wait
    with sessions.begin() as session:
        rollup(session, pricing, UNTIL, connections=connections)
        assert marked.is_set(), "the mark committed while the rollup's transaction was open"
    with sessions() as session:
        assert newest in set(session.scalars(text("SELECT hour FROM ledger_dirty_hours")))
