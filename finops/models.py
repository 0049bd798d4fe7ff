"""Database schema: SQLAlchemy 2.0 typed models. The schema changes only through an Alembic migration.

Instants are :class:`finops.sqltypes.EpochSeconds` (UTC epoch seconds); money is :class:`finops.sqltypes.Money`
(six decimals: the ledger's rounding quantum, see :mod:`finops.costmodel`); telemetry values are floats.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from sqlalchemy import (
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from finops.sqltypes import EpochSeconds, Money

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

UNALLOCATED_TEAM = "__unallocated__"
UNMAPPED_TEAM = "__unmapped__"


class Base(DeclarativeBase):
    """Declarative base with the Alembic naming convention."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Node(Base):
    """A GPU host, by hostname as Slurm's NodeList and the collector name it."""

    __tablename__ = "nodes"
    id: Mapped[int] = mapped_column(primary_key=True)
    hostname: Mapped[str] = mapped_column(String(255), unique=True)


class Gpu(Base):
    """A physical GPU: NVML UUID, product name, node and NVML index.

    ``uuid`` is unknown (NULL) for a GPU known only from a job's placement until its collector reports.
    ``in_service_from`` is when capacity cost starts accruing: its first sample or placement.
    """

    __tablename__ = "gpus"
    __table_args__ = (UniqueConstraint("node_id", "gpu_index"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    uuid: Mapped[str | None] = mapped_column(String(64), unique=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id"))
    gpu_index: Mapped[int] = mapped_column(Integer)
    model: Mapped[str] = mapped_column(String(128))
    memory_total_bytes: Mapped[int | None] = mapped_column(BigInteger)
    in_service_from: Mapped[datetime] = mapped_column(EpochSeconds)


class GpuSample(Base):
    """One GPU reading at one instant (base units). Unique on (GPU, timestamp): replays add nothing."""

    __tablename__ = "gpu_samples"
    gpu_id: Mapped[int] = mapped_column(ForeignKey("gpus.id"), primary_key=True)
    ts: Mapped[datetime] = mapped_column(EpochSeconds, primary_key=True)
    utilization_ratio: Mapped[float | None] = mapped_column(Float)
    memory_utilization_ratio: Mapped[float | None] = mapped_column(Float)
    memory_used_bytes: Mapped[int | None] = mapped_column(BigInteger)
    power_watts: Mapped[float | None] = mapped_column(Float)
    energy_joules: Mapped[float | None] = mapped_column(Float)
    temperature_celsius: Mapped[float | None] = mapped_column(Float)
    sm_clock_hertz: Mapped[float | None] = mapped_column(Float)
    clocks_event_reasons: Mapped[int | None] = mapped_column(BigInteger)
    job_id: Mapped[str | None] = mapped_column(String(64))


class Team(Base):
    """A cost owner. ``__unallocated__`` and ``__unmapped__`` are teams too, so every cent has an owner."""

    __tablename__ = "teams"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)


class AccountTeam(Base):
    """Slurm account → team."""

    __tablename__ = "account_teams"
    account: Mapped[str] = mapped_column(String(128), primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id"))


class Job(Base):
    """A scheduler job (Slurm terms). ``end`` is NULL while it runs."""

    __tablename__ = "jobs"
    __table_args__ = (UniqueConstraint("scheduler", "cluster", "job_id_raw"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    scheduler: Mapped[str] = mapped_column(String(16))
    cluster: Mapped[str] = mapped_column(String(128))
    job_id: Mapped[str] = mapped_column(String(64))
    job_id_raw: Mapped[str] = mapped_column(String(64))
    user: Mapped[str] = mapped_column(String(128))
    account: Mapped[str] = mapped_column(String(128))
    partition: Mapped[str] = mapped_column(String(128))
    name: Mapped[str] = mapped_column(String(255))
    state: Mapped[str] = mapped_column(String(32))
    submit: Mapped[datetime | None] = mapped_column(EpochSeconds)
    start: Mapped[datetime | None] = mapped_column(EpochSeconds)
    end: Mapped[datetime | None] = mapped_column(EpochSeconds)
    gpus: Mapped[int] = mapped_column(Integer)
    gpu_type: Mapped[str | None] = mapped_column(String(64))
    node_list: Mapped[str] = mapped_column(String(4096))
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id"))


class Allocation(Base):
    """A job holding one GPU over [start, end); ``end`` NULL while the job runs."""

    __tablename__ = "allocations"
    __table_args__ = (Index("ix_allocations_gpu_start", "gpu_id", "start"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    job_pk: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    gpu_id: Mapped[int] = mapped_column(ForeignKey("gpus.id"))
    start: Mapped[datetime] = mapped_column(EpochSeconds)
    end: Mapped[datetime | None] = mapped_column(EpochSeconds)


class LedgerEntry(Base):
    """Cost of one GPU in one UTC hour for one holder (a job, or nobody: ``job_pk`` NULL = unallocated).

    ``seconds`` of the hour this row covers; ``used_gpu_seconds`` = seconds × mean utilisation of the
    samples in those seconds; ``sample_count`` 0 means unmetered. Money columns are exact decimals.
    """

    __tablename__ = "ledger"
    __table_args__ = (Index("ix_ledger_hour_team", "hour", "team_id"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    hour: Mapped[datetime] = mapped_column(EpochSeconds, index=True)
    gpu_id: Mapped[int] = mapped_column(ForeignKey("gpus.id"))
    job_pk: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"), index=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id"))
    seconds: Mapped[int] = mapped_column(Integer)
    used_gpu_seconds: Mapped[float] = mapped_column(Float)
    sample_count: Mapped[int] = mapped_column(Integer)
    energy_joules: Mapped[float] = mapped_column(Float)
    allocated_cost: Mapped[Decimal] = mapped_column(Money)
    used_cost: Mapped[Decimal] = mapped_column(Money)
    idle_cost: Mapped[Decimal] = mapped_column(Money)
    energy_cost: Mapped[Decimal] = mapped_column(Money)
    currency: Mapped[str] = mapped_column(String(3))


class DirtyHour(Base):
    """An hour whose ledger rows must be rebuilt (new samples or jobs touched it)."""

    __tablename__ = "ledger_dirty_hours"
    hour: Mapped[datetime] = mapped_column(EpochSeconds, primary_key=True)


class IdleEpisode(Base):
    """An allocated GPU at or below the idle threshold over [start, end) for at least the idle window."""

    __tablename__ = "idle_episodes"
    __table_args__ = (UniqueConstraint("gpu_id", "job_pk", "start"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    gpu_id: Mapped[int] = mapped_column(ForeignKey("gpus.id"))
    job_pk: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    start: Mapped[datetime] = mapped_column(EpochSeconds)
    end: Mapped[datetime] = mapped_column(EpochSeconds)
    memory_held: Mapped[bool] = mapped_column(Boolean)
    cost: Mapped[Decimal] = mapped_column(Money)
    currency: Mapped[str] = mapped_column(String(3))


class Budget(Base):
    """A team's budget for one calendar month (``month`` = first instant of the month, UTC)."""

    __tablename__ = "budgets"
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id"), primary_key=True)
    month: Mapped[datetime] = mapped_column(EpochSeconds, primary_key=True)
    amount: Mapped[Decimal] = mapped_column(Money)
    currency: Mapped[str] = mapped_column(String(3))
