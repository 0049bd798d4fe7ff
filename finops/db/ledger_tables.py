"""The ledger's tables: its rows (one per GPU, UTC hour and holder), the team-hours summed from them, the hours marked
for rebuilding or re-pricing, and what the metering keeps between rollups (the sums per GPU-hour and holding, each
GPU's cursor, the holdings readings were assigned by, the readings' arrivals, the segments a TSDB metered).

They share the service's declarative base (:class:`finops.db.models.Base`) and so its metadata and Alembic naming
convention; the schema changes only through a migration in ``migrations/``.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from sqlalchemy import (
    BigInteger,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from finops.db.models import Base
from finops.db.sqltypes import EpochSeconds, Money


class LedgerEntry(Base):
    """Cost of one GPU in one UTC hour for one holder (a job, or nobody: ``job_pk`` NULL = unallocated).

    ``seconds`` of the hour this row covers; ``used_gpu_seconds`` = seconds × mean utilisation of the
    samples in those seconds; ``sample_count`` 0 means unmetered. Money columns are exact decimals.
    ``seconds`` are whole-GPU-equivalent: a MIG share of 1/7 held for an hour is 514 or 515 of them, split so
    a GPU-hour's rows add up to its in-service seconds. ``pricing_model`` is the one its rate came from.

    ``gpu_id`` and ``team_id`` are ids of :class:`Gpu` and :class:`Team` without foreign keys (migration 0010):
    the rollup writes them from those tables in the same statement, and GPUs and teams are never deleted, so
    checking each of a month's ~800,000 rows guarded nothing and cost a third of writing them. ``job_pk`` keeps
    its foreign key: deleting a job sets it NULL.

    An *unpriced* row (migration 0012) belongs to a GPU whose model has no price in the catalog in force: it keeps
    its seconds, utilisation, samples and energy, and ``allocated_cost``, ``used_cost`` and ``idle_cost`` are
    NULL (not 0: the cost is unknown); the model is its GPU's :attr:`Gpu.model`. ``energy_cost`` is priced by the
    catalog's tariff, not the GPU's rate, so it is kept. ``ix_ledger_unpriced`` indexes only unpriced rows.

    Hardware activity (migration 0021): ``profiled_seconds`` of the row's ``seconds`` were metered with readings that
    carry a profiling field (``seconds`` × the share of the holding's readings with one, rounded up); each
    ``*_ratio`` column is the mean of that activity (:data:`collector.contract.wire.ACTIVITY_COLUMNS`) over the
    readings that carry it, NULL when none does or the row is unallocated (never 0: unmeasured is not idle).
    ``sm_active_cost`` = ``allocated_cost`` × ``sm_active_ratio`` (:func:`finops.ledger.costmodel.used_cost`'s exact
    rule), NULL where either is.
    """

    __tablename__ = "ledger"
    __table_args__ = (
        Index("ix_ledger_hour_team", "hour", "team_id"),
        Index(
            "ix_ledger_unpriced",
            "hour",
            postgresql_where=text("allocated_cost IS NULL"),
            sqlite_where=text("allocated_cost IS NULL"),
        ),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    hour: Mapped[datetime] = mapped_column(EpochSeconds)
    gpu_id: Mapped[int] = mapped_column(Integer)
    job_pk: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"), index=True)
    team_id: Mapped[int] = mapped_column(Integer)
    seconds: Mapped[int] = mapped_column(Integer)
    used_gpu_seconds: Mapped[float] = mapped_column(Float)
    sample_count: Mapped[int] = mapped_column(Integer)
    energy_joules: Mapped[float] = mapped_column(Float)
    allocated_cost: Mapped[Decimal | None] = mapped_column(Money)
    used_cost: Mapped[Decimal | None] = mapped_column(Money)
    idle_cost: Mapped[Decimal | None] = mapped_column(Money)
    energy_cost: Mapped[Decimal] = mapped_column(Money)
    currency: Mapped[str] = mapped_column(String(3))
    pricing_model: Mapped[str | None] = mapped_column(String(16))
    profiled_seconds: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    sm_active_ratio: Mapped[float | None] = mapped_column(Float)
    sm_occupancy_ratio: Mapped[float | None] = mapped_column(Float)
    tensor_active_ratio: Mapped[float | None] = mapped_column(Float)
    dram_active_ratio: Mapped[float | None] = mapped_column(Float)
    fp64_active_ratio: Mapped[float | None] = mapped_column(Float)
    fp32_active_ratio: Mapped[float | None] = mapped_column(Float)
    fp16_active_ratio: Mapped[float | None] = mapped_column(Float)
    graphics_engine_active_ratio: Mapped[float | None] = mapped_column(Float)
    sm_active_cost: Mapped[Decimal | None] = mapped_column(Money)


class LedgerTeamHour(Base):
    """The ledger summed per UTC hour and team (:mod:`finops.ledger.team_hours`), rewritten with the ledger's hours.

    ``seconds``, ``used_gpu_seconds``, money and ``energy_joules`` are the sums of the team's ledger rows of the
    hour; ``metered_gpu_seconds`` and ``unmetered_gpu_seconds`` those of its rows held by a job with and without
    samples; ``currency`` the least of its rows' (one currency per ledger in practice).

    Hardware activity (migration 0021): ``profiled_gpu_seconds`` = Σ ``profiled_seconds``; for SM, tensor and DRAM
    activity, ``<activity>_gpu_seconds`` = Σ ``profiled_seconds`` × the row's mean and
    ``<activity>_measured_gpu_seconds`` = Σ ``profiled_seconds`` of the rows that have one (the team's mean is
    their quotient; NULL / 0 when nothing measured it); ``sm_active_cost`` = Σ of the rows' (NULL when none has one).
    """

    __tablename__ = "ledger_team_hours"
    hour: Mapped[datetime] = mapped_column(EpochSeconds, primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id"), primary_key=True)
    seconds: Mapped[int] = mapped_column(BigInteger)
    used_gpu_seconds: Mapped[float] = mapped_column(Float)
    metered_gpu_seconds: Mapped[int] = mapped_column(BigInteger)
    unmetered_gpu_seconds: Mapped[int] = mapped_column(BigInteger)
    energy_joules: Mapped[float] = mapped_column(Float)
    allocated_cost: Mapped[Decimal] = mapped_column(Money)
    used_cost: Mapped[Decimal] = mapped_column(Money)
    idle_cost: Mapped[Decimal] = mapped_column(Money)
    energy_cost: Mapped[Decimal] = mapped_column(Money)
    currency: Mapped[str] = mapped_column(String(3))
    unpriced_gpu_seconds: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    profiled_gpu_seconds: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    sm_active_gpu_seconds: Mapped[float | None] = mapped_column(Float)
    sm_active_measured_gpu_seconds: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    tensor_active_gpu_seconds: Mapped[float | None] = mapped_column(Float)
    tensor_active_measured_gpu_seconds: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    dram_active_gpu_seconds: Mapped[float | None] = mapped_column(Float)
    dram_active_measured_gpu_seconds: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    sm_active_cost: Mapped[Decimal | None] = mapped_column(Money)


class DirtyHour(Base):
    """An hour whose ledger rows must be rebuilt (new samples or jobs touched it)."""

    __tablename__ = "ledger_dirty_hours"
    hour: Mapped[datetime] = mapped_column(EpochSeconds, primary_key=True)


class RepricedHour(Base):
    """An hour marked dirty by a price change alone (a catalog import, a pricing rule: :func:`finops.db.hours.
    mark_hours_repriced`), whose stored idle episodes the next rollup re-prices without judging them again
    (:func:`finops.db.hours.claim_repriced_hours`). Any other mark of the hour in :class:`DirtyHour` (new readings,
    jobs) removes it: a ``BEFORE INSERT`` trigger on ``ledger_dirty_hours`` (migration 0028), which fires also for a
    mark that is already there."""

    __tablename__ = "ledger_repriced_hours"
    hour: Mapped[datetime] = mapped_column(EpochSeconds, primary_key=True)


class ProfiledHour(Base):
    """An hour some of whose stored readings carry a hardware activity field
    (:data:`collector.contract.wire.ACTIVITY_COLUMNS`), marked by ingest when it stores them. The ledger's metering
    reads the activity columns only for hours marked here (:func:`finops.ledger.metering.meter`), so a fleet without
    profiling data pays nothing for them. Marks are never removed (an hour whose readings expired is not rebuilt)."""

    __tablename__ = "profiled_hours"
    hour: Mapped[datetime] = mapped_column(EpochSeconds, primary_key=True)


class TsdbGpuMetering(Base):
    """The metering of one GPU over one segment [start, stop) of a UTC hour, read from a Prometheus-compatible TSDB
    by PromQL (:mod:`finops.ingest.tsdb_metering`) instead of raw readings.

    A segment lies inside one hour and is cut wherever an allocation of the GPU starts or ends, so that every
    holding of the hour is a union of segments. ``samples``: readings with a utilisation; ``utilization_sum``: Σ of
    their utilisation ratios; ``energy_joules``: Σ of the energy counter's increments ending in the segment (the
    ledger's rule); ``memory_max_bytes``: the most memory in use (NULL: no memory reading). Hardware activity
    (migration 0021): ``readings`` in the segment, ``profiled`` of them with a profiling field, and per activity of
    :data:`collector.contract.wire.ACTIVITY_COLUMNS` (``sm_active_ratio`` → ``sm_active``) the Σ of its values
    (``<activity>_sum``) and how many readings had one (``<activity>_n``).
    """

    __tablename__ = "tsdb_gpu_metering"
    gpu_id: Mapped[int] = mapped_column(ForeignKey("gpus.id"), primary_key=True)
    start: Mapped[datetime] = mapped_column(EpochSeconds, primary_key=True)
    stop: Mapped[datetime] = mapped_column(EpochSeconds)
    samples: Mapped[int] = mapped_column(Integer)
    utilization_sum: Mapped[float] = mapped_column(Float)
    energy_joules: Mapped[float] = mapped_column(Float)
    memory_max_bytes: Mapped[int | None] = mapped_column(BigInteger)
    readings: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    profiled: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    sm_active_sum: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    sm_active_n: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    sm_occupancy_sum: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    sm_occupancy_n: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    tensor_active_sum: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    tensor_active_n: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    dram_active_sum: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    dram_active_n: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    fp64_active_sum: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    fp64_active_n: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    fp32_active_sum: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    fp32_active_n: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    fp16_active_sum: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    fp16_active_n: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    graphics_engine_active_sum: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    graphics_engine_active_n: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class _GpuHourHoldingKey:
    """The key of a table kept per GPU-hour and holding by the ledger's metering: the hour (epoch seconds of its
    start), the GPU, and the allocation (0: readings held by no allocation, or a shared GPU-hour as a whole). The key
    columns come first in the table, as the migration creates them."""

    hour: Mapped[int] = mapped_column(BigInteger, primary_key=True, sort_order=-1)
    gpu_id: Mapped[int] = mapped_column(Integer, primary_key=True, sort_order=-1)
    allocation_id: Mapped[int] = mapped_column(Integer, primary_key=True, sort_order=-1)


class GpuHourMetering(_GpuHourHoldingKey, Base):
    """What the ledger's metering has summed of one GPU-hour's readings per holding, kept between rollups so that
    each reading is metered once (:mod:`finops.ledger.metering`): the readings of the GPU before its
    :class:`MeteringCursor` are in these sums, later ones are added by the next rollup.

    ``allocation_id`` 0: readings held by no allocation, or a shared GPU-hour as a whole. The sums are exact
    integers in fixed point, so that adding a rollup's new readings to them gives what summing all of the hour's
    readings at once gives: utilisation and activity ratios in units of 2^-40 (each reading's value rounded down),
    energy counter increments in units of 2^-20 J. ``samples``: readings with a utilisation; ``readings``: all;
    ``profiled``: those with a hardware activity field; per activity of
    :data:`collector.contract.wire.ACTIVITY_COLUMNS` (``sm_active_ratio`` → ``sm_active``) the sum
    (``<activity>_units``) and how many readings had one (``<activity>_n``)."""

    __tablename__ = "gpu_hour_metering"
    samples: Mapped[int] = mapped_column(Integer)
    utilization_units: Mapped[int] = mapped_column(BigInteger)
    energy_units: Mapped[int] = mapped_column(BigInteger)
    readings: Mapped[int] = mapped_column(Integer)
    profiled: Mapped[int] = mapped_column(Integer)
    sm_active_units: Mapped[int] = mapped_column(BigInteger)
    sm_active_n: Mapped[int] = mapped_column(Integer)
    sm_occupancy_units: Mapped[int] = mapped_column(BigInteger)
    sm_occupancy_n: Mapped[int] = mapped_column(Integer)
    tensor_active_units: Mapped[int] = mapped_column(BigInteger)
    tensor_active_n: Mapped[int] = mapped_column(Integer)
    dram_active_units: Mapped[int] = mapped_column(BigInteger)
    dram_active_n: Mapped[int] = mapped_column(Integer)
    fp64_active_units: Mapped[int] = mapped_column(BigInteger)
    fp64_active_n: Mapped[int] = mapped_column(Integer)
    fp32_active_units: Mapped[int] = mapped_column(BigInteger)
    fp32_active_n: Mapped[int] = mapped_column(Integer)
    fp16_active_units: Mapped[int] = mapped_column(BigInteger)
    fp16_active_n: Mapped[int] = mapped_column(Integer)
    graphics_engine_active_units: Mapped[int] = mapped_column(BigInteger)
    graphics_engine_active_n: Mapped[int] = mapped_column(Integer)


class MeteringCursor(Base):
    """Per GPU, the instant after its last reading the ledger's metering has summed (epoch seconds): readings before
    it are in :class:`GpuHourMetering`, readings at or after it are new to the next rollup. A reading stored later
    with an earlier instant (a spool replayed out of order) is a late one: its :class:`ReadingArrival` makes the
    next rollup meter the GPU again from the start of that reading's hour."""

    __tablename__ = "metering_cursors"
    gpu_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    through: Mapped[int] = mapped_column(BigInteger)


class MeteredHolding(_GpuHourHoldingKey, Base):
    """The holdings (allocations clipped to the GPU-hour, with whether the GPU-hour is shared) that a GPU-hour's
    readings before its :class:`MeteringCursor` were assigned by when they were metered: a rollup that finds other
    holdings there now (a job imported, ended or moved) meters that GPU-hour again."""

    __tablename__ = "metered_holdings"
    start: Mapped[int] = mapped_column(BigInteger)
    stop: Mapped[int] = mapped_column(BigInteger)
    shared: Mapped[int] = mapped_column(Integer)


class ReadingArrival(Base):
    """Readings stored since the last rollup: per ingest transaction, the earliest instant per GPU, as a JSON object
    ``{"<gpu id>": <epoch seconds>}``, and on PostgreSQL the storing transaction's id (``pg_current_xact_id``), which
    tells the rollup whether the readings were committed before it metered. The rollup reads them to find late
    readings (before the GPU's :class:`MeteringCursor`) and removes those it has dealt with."""

    __tablename__ = "reading_arrivals"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    earliest: Mapped[str] = mapped_column(Text)
    xact: Mapped[int | None] = mapped_column(BigInteger)
