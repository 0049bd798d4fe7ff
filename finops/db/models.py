"""Database schema: SQLAlchemy 2.0 typed models. The schema changes only through an Alembic migration.

Instants are :class:`finops.db.sqltypes.EpochSeconds` (UTC epoch seconds); money is :class:`finops.db.sqltypes.Money`
(six decimals: the ledger's rounding quantum, see :mod:`finops.ledger.costmodel`); telemetry values are floats.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from collector.contract.bounds import JOB_ID_MAX_LENGTH
from finops.db.sqltypes import EpochSeconds, Money

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

EVIDENCE_MAX_LENGTH = 255
"""Longest text of an idle episode's waste evidence (characters)."""
UNALLOCATED_TEAM = "__unallocated__"
UNMAPPED_TEAM = "__unmapped__"
CLAIMED_USER_PREFIX = "claimed:"
"""Prefix of a job's ``user`` that nobody verified (a Kubernetes pod's ``user`` label): ``claimed:alice``. A colon
is in no Kubernetes label value and no POSIX login, so a claimed name never equals a verified one."""


class Base(DeclarativeBase):
    """Declarative base with the Alembic naming convention."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Node(Base):
    """A GPU host, by hostname as Slurm's NodeList and the collector name it.

    ``partition``: the Slurm partition of the newest job placed on it (a node in several partitions takes the
    latest); ``labels``: Kubernetes node labels (``{"node.kubernetes.io/instance-type": "p5.48xlarge"}``).
    Both feed :class:`PricingRule` selection.

    The node inventory (:mod:`finops.jobs.inventory`, migration 0011): ``gpu_model``, the model of the node's GPUs
    as the site says (a price catalog model key, or the scheduler's raw GPU type when it names none), the model of
    its GPUs that no collector has reported; ``partitions``: the Slurm partitions it is in, comma-separated.

    Its state in the inventory (:mod:`finops.jobs.capacity`, migration 0024): ``cluster``, the cluster whose
    inventory lists it; ``state``, Slurm's node State as ``scontrol show node`` printed it (``IDLE``,
    ``MIXED+DRAIN``, ``DOWN*``), NULL when no inventory lists it (never imported, or gone from its cluster's
    inventory); ``state_reason``: Slurm's Reason; ``state_since``: the import that first saw that state (or the
    node gone).
    """

    __tablename__ = "nodes"
    id: Mapped[int] = mapped_column(primary_key=True)
    hostname: Mapped[str] = mapped_column(String(255), unique=True)
    partition: Mapped[str | None] = mapped_column(String(128))
    labels: Mapped[dict[str, str] | None] = mapped_column(JSON)
    gpu_model: Mapped[str | None] = mapped_column(String(128))
    partitions: Mapped[str | None] = mapped_column(String(1024))
    cluster: Mapped[str | None] = mapped_column(String(128))
    state: Mapped[str | None] = mapped_column(String(128))
    state_reason: Mapped[str | None] = mapped_column(String(255))
    state_since: Mapped[datetime | None] = mapped_column(EpochSeconds)


class Gpu(Base):
    """A physical GPU: NVML UUID, product name, node and NVML index.

    ``uuid`` is unknown (NULL) for a GPU known only from a job's placement or the node inventory until its
    collector reports. ``in_service_from``: the earliest instant it was in service (its first reading, job
    placement or inventory period); no ledger hour before it has a row of it.

    When it is in service (its capacity, :mod:`finops.ledger.sql` step 1): over its :class:`GpuService` periods
    when it has any (the node inventory writes them); else, when a collector reported it (a UUID), from
    ``in_service_from`` on; and, whatever those say, while a job holds it. A GPU only job imports know is thus in
    service only while jobs held it.
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


class GpuService(Base):
    """A period [start, end) in which a GPU was in service as the node inventory says (migration 0024): from an
    import that listed its node in service to the first that listed it out of service or not at all (``end`` NULL:
    still in service). A GPU's periods do not overlap (:mod:`finops.jobs.capacity` keeps them so)."""

    __tablename__ = "gpu_service"
    __table_args__ = (Index("ix_gpu_service_gpu_start", "gpu_id", "start"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    gpu_id: Mapped[int] = mapped_column(ForeignKey("gpus.id"))
    start: Mapped[datetime] = mapped_column(EpochSeconds)
    end: Mapped[datetime | None] = mapped_column(EpochSeconds)


class GpuSample(Base):
    """One GPU reading at one instant (base units). Unique on (GPU, timestamp): replays add nothing.

    On PostgreSQL partitioned by day on ``ts`` (:mod:`finops.ingest.partitions`, migration 0003).
    """

    __tablename__ = "gpu_samples"
    __table_args__ = ({"postgresql_partition_by": "RANGE (ts)"},)
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
    job_id: Mapped[str | None] = mapped_column(String(JOB_ID_MAX_LENGTH))
    sm_active_ratio: Mapped[float | None] = mapped_column(Float)
    sm_occupancy_ratio: Mapped[float | None] = mapped_column(Float)
    tensor_active_ratio: Mapped[float | None] = mapped_column(Float)
    dram_active_ratio: Mapped[float | None] = mapped_column(Float)
    fp64_active_ratio: Mapped[float | None] = mapped_column(Float)
    fp32_active_ratio: Mapped[float | None] = mapped_column(Float)
    fp16_active_ratio: Mapped[float | None] = mapped_column(Float)
    graphics_engine_active_ratio: Mapped[float | None] = mapped_column(Float)


class Team(Base):
    """A cost owner. ``__unallocated__`` and ``__unmapped__`` are teams too, so every cent has an owner."""

    __tablename__ = "teams"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)


TEAM_RULE_KINDS = ("label", "namespace", "account")
"""Team rule kinds: a Kubernetes label, a Kubernetes namespace, a Slurm account. The order they are tried in is the
site's team rule precedence (:data:`TEAM_RULE_PRECEDENCES`)."""

TEAM_RULE_PRECEDENCES = {
    "namespace": ("namespace", "account", "label"),
    "label": ("label", "namespace", "account"),
}
"""Team rule precedence name -> the order rule kinds are tried in. ``namespace`` (the default): a rule naming a pod's
namespace (or account, which for a pod is its namespace) is never overridden by the pod's own labels, which whoever
creates the pod chooses; labels decide only in namespaces no rule names. ``label``: labels first, as Kubecost's team
allocation does, for clusters where only trusted pipelines set the labels."""
DEFAULT_TEAM_RULE_PRECEDENCE = "namespace"


class TeamRule(Base):
    """``kind`` value → team: Slurm ``account``, Kubernetes ``namespace``, or Kubernetes ``label`` ``key=value``.

    ``key`` is the label name for ``label`` rules and empty otherwise. A job takes the team of its first
    matching rule in the order of the site's precedence (:class:`SiteOption` ``team_rule_precedence``, one of
    :data:`TEAM_RULE_PRECEDENCES`); with none it goes to ``__unmapped__``.
    """

    __tablename__ = "team_rules"
    __table_args__ = (
        UniqueConstraint("kind", "key", "value"),
        CheckConstraint("kind IN ('label', 'namespace', 'account')", name="kind"),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    key: Mapped[str] = mapped_column(String(253), default="")
    value: Mapped[str] = mapped_column(String(255))
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id"))


class Job(Base):
    """A scheduler job: a Slurm job (``scheduler`` "slurm") or a Kubernetes pod ("kubernetes").

    Slurm terms throughout: a pod's ``account`` is its namespace, ``user`` the ``user`` label if any, stored as
    claimed (``claimed:alice``, :data:`CLAIMED_USER_PREFIX`): whoever creates a pod writes its labels, so the name is
    the pod's claim, not an identity the cluster checked, and never reads as the Slurm user ``alice``;
    ``partition`` its node pool label if any, ``job_id`` ``namespace/name`` and ``job_id_raw`` the pod UID.
    ``namespace``, ``labels`` are Kubernetes only; ``project`` is optional (budgets per project).
    ``node_list`` is a Slurm hostlist expression (``gpu-[01-04]``, as
    :func:`finops.jobs.slurm_hostlist.compress_hostlist` writes it; rows imported before are comma-separated names,
    which read the same). ``end`` is NULL while it runs.

    One row per run (migration 0026): a requeued Slurm job's runs share ``job_id_raw`` and differ in ``start``
    (:func:`finops.jobs.slurm_import.import_sacct`); a pod has one run.
    """

    __tablename__ = "jobs"
    __table_args__ = (UniqueConstraint("scheduler", "cluster", "job_id_raw", "start", name="uq_jobs_run"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    scheduler: Mapped[str] = mapped_column(String(16))
    cluster: Mapped[str] = mapped_column(String(128))
    job_id: Mapped[str] = mapped_column(String(JOB_ID_MAX_LENGTH))
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
    namespace: Mapped[str | None] = mapped_column(String(253))
    labels: Mapped[dict[str, str] | None] = mapped_column(JSON)
    project: Mapped[str | None] = mapped_column(String(128))


class Allocation(Base):
    """A job holding one GPU, or a share of it, over [start, end); ``end`` NULL while the job runs.

    ``share_num / share_den`` is the fraction of the physical GPU held: 1/1 for a whole GPU, a MIG profile's
    compute slices over the parent's (``1g.10gb`` on an H100: 1/7). ``mig_profile`` names the slice.
    """

    __tablename__ = "allocations"
    __table_args__ = (
        Index("ix_allocations_gpu_start", "gpu_id", "start"),
        CheckConstraint("share_num > 0 AND share_num <= share_den", name="share"),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    job_pk: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    gpu_id: Mapped[int] = mapped_column(ForeignKey("gpus.id"))
    start: Mapped[datetime] = mapped_column(EpochSeconds)
    end: Mapped[datetime | None] = mapped_column(EpochSeconds)
    share_num: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    share_den: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    mig_profile: Mapped[str | None] = mapped_column(String(32))


class IdleEpisode(Base):
    """An allocated GPU at or below the idle threshold over [start, end) for at least the idle window.

    ``reason`` is its probable waste reason (a key of :data:`finops.analysis.waste.REASONS`, migration 0020) and
    ``evidence`` what showed it ("2.1 GB/s Lustre reads during the episode"), judged with the episode; both NULL
    for an episode stored before reasons were, until it is judged again.
    """

    __tablename__ = "idle_episodes"
    __table_args__ = (UniqueConstraint("gpu_id", "job_pk", "start"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    gpu_id: Mapped[int] = mapped_column(ForeignKey("gpus.id"))
    job_pk: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    start: Mapped[datetime] = mapped_column(EpochSeconds)
    end: Mapped[datetime] = mapped_column(EpochSeconds)
    memory_held: Mapped[bool] = mapped_column(Boolean)
    cost: Mapped[Decimal | None] = mapped_column(Money)
    """The capacity cost of [start, end); None (unpriced) when the GPU's model has no price in effect."""
    currency: Mapped[str] = mapped_column(String(3))
    reason: Mapped[str | None] = mapped_column(String(32))
    evidence: Mapped[str | None] = mapped_column(String(EVIDENCE_MAX_LENGTH))


class IdleRunCarry(Base):
    """The idle runs a scheduled re-judging found in one read [``lo``, ``hi``) (epoch seconds) of the readings, up to
    the instant each GPU's readings were settled, carried to the next re-judging of the same read so that it reads
    only the readings after it (:mod:`finops.analysis.idle_carry`, migration 0029); ``document``: JSON."""

    __tablename__ = "idle_run_carry"
    lo: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    hi: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    document: Mapped[str] = mapped_column(Text)


class NodeIoHour(Base):
    """A node's fabric or storage throughput of one kind over one UTC hour, from its collector's ``node_io`` entries
    (:mod:`finops.ingest.node_io`, migration 0020).

    ``kind``: a key of :data:`collector.contract.node_io.NODE_IO_COUNTERS` (``lustre_read``, ``infiniband_received``,
    …); ``readings``: the entries of the hour that carried it; ``rate_sum`` and ``rate_max``: the sum and the largest
    of their rates, bytes per second (the hour's mean is ``rate_sum / readings``); ``last_ts``: the newest entry's
    instant, before which a later entry of the hour is taken for a replay and not added again. Expires with the raw
    samples (:func:`finops.ingest.partitions.prune_samples`).
    """

    __tablename__ = "node_io_hours"
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id"), primary_key=True)
    hour: Mapped[datetime] = mapped_column(EpochSeconds, primary_key=True, index=True)
    kind: Mapped[str] = mapped_column(String(32), primary_key=True)
    readings: Mapped[int] = mapped_column(Integer)
    rate_sum: Mapped[float] = mapped_column(Float)
    rate_max: Mapped[float] = mapped_column(Float)
    last_ts: Mapped[datetime] = mapped_column(EpochSeconds)


class Budget(Base):
    """A team's budget for one calendar month (``month`` = first instant of the month, UTC).

    ``project`` empty: the whole team; otherwise only the team's jobs with that project.
    """

    __tablename__ = "budgets"
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id"), primary_key=True)
    month: Mapped[datetime] = mapped_column(EpochSeconds, primary_key=True)
    project: Mapped[str] = mapped_column(String(128), primary_key=True, default="", server_default="")
    amount: Mapped[Decimal] = mapped_column(Money)
    currency: Mapped[str] = mapped_column(String(3))


class Event(Base):
    """Something the alerts package must hear of once: a budget threshold crossed, a spend anomaly.

    ``dedupe_key`` makes recording idempotent (``budget:alpha::2026-11:80``); ``payload`` holds the figures
    (money as decimal strings). ``consumed_at`` is set when the alerts package has taken it.
    """

    __tablename__ = "events"
    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[str] = mapped_column(String(32), index=True)
    dedupe_key: Mapped[str] = mapped_column(String(255), unique=True)
    team_id: Mapped[int | None] = mapped_column(ForeignKey("teams.id"))
    occurred_at: Mapped[datetime] = mapped_column(EpochSeconds)
    payload: Mapped[dict[str, object]] = mapped_column(JSON)
    consumed_at: Mapped[datetime | None] = mapped_column(EpochSeconds, index=True)


class PricingRule(Base):
    """Which pricing model a node's GPUs are billed under: by ``node`` hostname, Kubernetes ``node_label``
    ``key=value``, or Slurm ``partition``; the first match in that order wins, else the configured default."""

    __tablename__ = "pricing_rules"
    __table_args__ = (
        UniqueConstraint("selector", "key", "value"),
        CheckConstraint("selector IN ('node', 'node_label', 'partition')", name="selector"),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    selector: Mapped[str] = mapped_column(String(16))
    key: Mapped[str] = mapped_column(String(253), default="")
    value: Mapped[str] = mapped_column(String(255))
    pricing_model: Mapped[str] = mapped_column(String(16))


class PriceCatalogVersion(Base):
    """An imported price catalog (the YAML text, validated before it is stored); the newest is in force."""

    __tablename__ = "price_catalogs"
    id: Mapped[int] = mapped_column(primary_key=True)
    imported_at: Mapped[datetime] = mapped_column(EpochSeconds)
    source: Mapped[str] = mapped_column(String(1024))
    body: Mapped[str] = mapped_column(Text)


class SiteOption(Base):
    """A site-wide choice kept in the database, so every process (service, scheduler, CLI) applies the same one:
    ``name`` -> ``value``. Only ``team_rule_precedence`` (:data:`TEAM_RULE_PRECEDENCES`, absent:
    :data:`DEFAULT_TEAM_RULE_PRECEDENCE`)."""

    __tablename__ = "site_options"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(String(255))


class Watermark(Base):
    """How far a periodic import has read (e.g. ``sacct:cluster-a``): the instant to resume from."""

    __tablename__ = "watermarks"
    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    value: Mapped[datetime] = mapped_column(EpochSeconds)


class GpuJobUtilization(Base):
    """One job's SM utilisation of a GPU that processes of several jobs used at once (time-slicing, MPS), at one
    reading: what a collector's ``job_utilization`` entry carries (:class:`collector.contract.wire.JobUtilization`).

    ``ts``: the reading's instant (epoch seconds); ``job_id``: as :attr:`GpuSample.job_id` (Slurm ``JobIDRaw`` or
    ``pod/<uid>``); ``utilization_ratio``: 0..1, the fraction of the collector's cycle a kernel of the job's
    processes ran (sum of their NVML ``smUtil`` / 100, capped at 1). Unique on (GPU, instant, job): replays add
    nothing. Expires with the raw samples (:func:`finops.ingest.partitions.prune_samples`); read per GPU-hour by
    :func:`finops.ledger.job_utilization.job_utilization_by_gpu_hour`.
    """

    __tablename__ = "gpu_job_utilization"
    gpu_id: Mapped[int] = mapped_column(ForeignKey("gpus.id"), primary_key=True)
    ts: Mapped[datetime] = mapped_column(EpochSeconds, primary_key=True, index=True)
    job_id: Mapped[str] = mapped_column(String(JOB_ID_MAX_LENGTH), primary_key=True)
    utilization_ratio: Mapped[float] = mapped_column(Float)


class NodeToken(Base):
    """A collector's credential for one node (``gpu-finops nodes token create``, :mod:`finops.ingest.node_tokens`).

    The token is ``gft_<id>_<secret>``: ``id`` is public (``nodes token list|revoke`` name it), only the SHA-256 of
    ``secret`` is stored (hex). ``node`` is a hostname as batches name it, not a foreign key: a token may be made
    before the node's first batch. A token admits batches of ``node`` only, until ``revoked_at`` or ``expires_at``
    (None: never); ``last_used_at`` is updated at most once a minute.
    """

    __tablename__ = "node_tokens"
    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    node: Mapped[str] = mapped_column(String(255), index=True)
    secret_sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(EpochSeconds)
    expires_at: Mapped[datetime | None] = mapped_column(EpochSeconds)
    revoked_at: Mapped[datetime | None] = mapped_column(EpochSeconds)
    last_used_at: Mapped[datetime | None] = mapped_column(EpochSeconds)


class ApiToken(Base):
    """A REST API credential (``gpu-finops api-token create``, :mod:`finops.access.api_tokens`).

    The token is ``gfa_<id>_<secret>``; only the SHA-256 of ``secret`` is stored (hex), as for :class:`NodeToken`.
    ``role`` is ``viewer`` (reads everything), ``team`` (reads ``team``'s data only) or ``admin`` (reads and
    changes everything); ``team`` is set for the ``team`` role only. ``name`` says whose it is (free text).
    """

    __tablename__ = "api_tokens"
    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    role: Mapped[str] = mapped_column(String(16))
    team: Mapped[str | None] = mapped_column(String(128))
    name: Mapped[str] = mapped_column(String(255), default="")
    secret_sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(EpochSeconds)
    expires_at: Mapped[datetime | None] = mapped_column(EpochSeconds)
    revoked_at: Mapped[datetime | None] = mapped_column(EpochSeconds)
    last_used_at: Mapped[datetime | None] = mapped_column(EpochSeconds)


class AuditEntry(Base):
    """One change made through the REST API or the command line (:mod:`finops.access.audit`).

    ``actor`` is who made it: ``api-token:<id>``, ``api-token:FINOPS_API_TOKEN``, ``os-user:<login>`` or
    ``system:<what>``; ``action`` what was done (``budget.set``, ``team_rule.delete``, …); ``subject`` what it was
    done to (``team vision month 2026-11``); ``before`` and ``after`` the changed thing's state (JSON; None: it did
    not exist, or does not any more).
    """

    __tablename__ = "audit_log"
    id: Mapped[int] = mapped_column(primary_key=True)
    at: Mapped[datetime] = mapped_column(EpochSeconds, index=True)
    actor: Mapped[str] = mapped_column(String(160))
    action: Mapped[str] = mapped_column(String(64))
    subject: Mapped[str] = mapped_column(String(512))
    before: Mapped[dict[str, object] | None] = mapped_column(JSON)
    after: Mapped[dict[str, object] | None] = mapped_column(JSON)


class JobLease(Base):
    """Which process may run one scheduled job (``rollup``, ``alert_delivery``, …) until when
    (:mod:`finops.service.leases`, migration 0016; used on PostgreSQL).

    ``holder`` names a scheduler process (``host:pid:random``); ``acquired_at`` is when it took the lease from
    nobody or from another holder, ``expires_at`` when the lease ends unless the holder renews it, both in the
    database's clock (epoch seconds). Another process may take the lease once ``expires_at`` has passed.
    """

    __tablename__ = "job_leases"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(255))
    acquired_at: Mapped[datetime] = mapped_column(EpochSeconds)
    expires_at: Mapped[datetime] = mapped_column(EpochSeconds)


class UntimelyReadings(Base):
    """Readings ingest refused for their time, per node and reason (:mod:`finops.ingest.untimely`, migration 0023).

    ``reason``: ``future`` (stamped more than the grace ahead of the service's clock: the node's clock is fast) or
    ``too_old`` (older than the sample retention) (:data:`collector.contract.wire.UNTIMELY_REASONS`); ``readings``
    refused since ``first_at``; ``last_at`` and ``last_error`` (the refusal's text, saying how far off) of the
    newest such batch. Instants in the service's clock.
    """

    __tablename__ = "untimely_readings"
    node: Mapped[str] = mapped_column(String(255), primary_key=True)
    reason: Mapped[str] = mapped_column(String(16), primary_key=True)
    readings: Mapped[int] = mapped_column(BigInteger)
    first_at: Mapped[datetime] = mapped_column(EpochSeconds)
    last_at: Mapped[datetime] = mapped_column(EpochSeconds)
    last_error: Mapped[str] = mapped_column(String(512))
