"""Storing collector batches: GPU inventory upsert, idempotent sample insert, per-job utilisation of shared GPUs,
the node's fabric and storage rates (:mod:`finops.ingest.node_io`), dirty-hour marking (and the marking of hours whose
readings carry hardware activity: ``profiled_hours``).

A batch's readings, rows or columns (:mod:`collector.contract.wire`), become ``gpu_samples`` rows without a Python
object per reading for columns: each series is zipped straight into row tuples and written by one binary
``COPY`` (:func:`finops.db.dialect.bulk_insert_ignoring_conflicts`). On PostgreSQL the day partitions the rows
fall in are made first when missing (:class:`finops.ingest.partitions.PartitionCache`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from typing import Any

import psycopg
from sqlalchemy import String, bindparam, event, func, select, update
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Session, SessionTransaction

from collector.contract.wire import ACTIVITY_COLUMNS, READING_COLUMNS, GpuInfo, GpuSeries, IngestBatch
from finops.db.dialect import bulk_insert_ignoring_conflicts, insert_ignoring_conflicts
from finops.db.hours import LEDGER_WATERMARK, mark_hours_dirty
from finops.db.ledger_tables import DirtyHour, ProfiledHour
from finops.db.models import Gpu, GpuJobUtilization, GpuSample, Node, Watermark
from finops.ingest.node_io import store_node_io
from finops.ingest.package_split import split_packages
from finops.ingest.partitions import DAY, PartitionCache
from finops.ledger.metering_state import arrival_statement
from finops.timeutil import HOUR, floor_hour, to_epoch

SAMPLE_COLUMNS = ("gpu_id", "ts", *READING_COLUMNS)
"""``gpu_samples`` columns in the order of the row tuples ingest writes."""
UNPROFILED_READING_COLUMNS = tuple(name for name in READING_COLUMNS if name not in ACTIVITY_COLUMNS)
"""The reading fields of batches that carry no hardware activity: their rows leave the activity columns out of the
``COPY`` (NULL by default) rather than sending eight nulls per row."""


def _carries_activity(batches: Sequence[IngestBatch]) -> bool:
    """Whether any reading of ``batches`` carries a hardware activity field (:data:`ACTIVITY_COLUMNS`)."""
    return any(getattr(s, name) is not None for b in batches for s in b.series for name in ACTIVITY_COLUMNS) or any(
        getattr(r, name) is not None for b in batches for r in b.samples for name in ACTIVITY_COLUMNS
    )


JOB_UTILIZATION_COLUMNS = ("gpu_id", "ts", "job_id", "utilization_ratio")
"""``gpu_job_utilization`` columns in the order of the row tuples ingest writes."""

_GPUS: Any = Gpu.__table__
_NODES: Any = Node.__table__
_COLUMNS = (_GPUS.c.id, _GPUS.c.uuid, _GPUS.c.gpu_index, _GPUS.c.model, _NODES.c.hostname)
_WANTED_UUIDS = func.unnest(bindparam("uuids", type_=ARRAY(String))).table_valued("uuid").render_derived("wanted")
_WANTED_NODES = func.unnest(bindparam("nodes", type_=ARRAY(String))).table_valued("hostname").render_derived("wanted")
_BY_UUID: dict[str, Any] = {
    "postgresql": select(*_COLUMNS).select_from(
        _WANTED_UUIDS.join(_GPUS, _GPUS.c.uuid == _WANTED_UUIDS.c.uuid).join(_NODES, _NODES.c.id == _GPUS.c.node_id)
    ),
    "sqlite": select(*_COLUMNS)
    .join(_NODES, _NODES.c.id == _GPUS.c.node_id)
    .where(_GPUS.c.uuid.in_(bindparam("uuids", expanding=True))),
}
_BY_NODE: dict[str, Any] = {
    "postgresql": select(*_COLUMNS).select_from(
        _WANTED_NODES.join(_NODES, _NODES.c.hostname == _WANTED_NODES.c.hostname).join(
            _GPUS, _GPUS.c.node_id == _NODES.c.id
        )
    ),
    "sqlite": select(*_COLUMNS)
    .join(_NODES, _NODES.c.id == _GPUS.c.node_id)
    .where(_NODES.c.hostname.in_(bindparam("nodes", expanding=True))),
}
"""The GPUs batches name (``_BY_UUID``) and the GPUs of nodes (``_BY_NODE``), for :meth:`Ingestor.conflicts`, per
dialect: Core statements built once and run on the session's connection, about half the CPU of building and running
them through the ORM per batch. On PostgreSQL the names go as an array, so a statement's text never changes:
psycopg parses it once and prepares it on the server, where a list of placeholders as long as the names would be a
new statement for each count of GPUs. The array is unnested and joined to the unique index on ``gpus.uuid``
(``nodes.hostname``), one lookup per name: ``= ANY`` without planner statistics (a fleet registered since the last
``ANALYZE``) scanned ``gpus``, comparing each row with each name, and the ``OR`` of the two across the join, which
one statement asked before, read every GPU of the fleet: 2.8 ms of PostgreSQL CPU for a round of 64 GPUs at 2,400
GPUs, against 0.4–0.55 ms so."""
_HOUR_OF = HOUR.__rfloordiv__  # epoch seconds -> hour number, mapped over a series in C


@dataclass(frozen=True, slots=True)
class _KnownGpu:
    gpu_id: int
    in_service_from: int


def _mark_hours(table: str, hours: set[int]) -> str:
    """``INSERT … ON CONFLICT DO NOTHING`` of the hour starts into ``table`` (``ledger_dirty_hours``: what
    :func:`finops.db.hours.mark_hours_dirty` does; ``profiled_hours``), as one statement that can travel with the
    sample insert."""
    values = ", ".join(f"({int(hour)})" for hour in sorted(hours))
    return f"INSERT INTO {table} (hour) VALUES {values} ON CONFLICT DO NOTHING"  # noqa: S608


@dataclass(slots=True)
class _Plan:
    """What :meth:`Ingestor.store_all` needs of one batch before it writes: each GPU's earliest reading (UUID ->
    epoch seconds), the hours its readings fall in (epoch // 3600) and its row readings' instants (epoch seconds)."""

    first_seen: dict[str, int]
    hour_numbers: set[int]
    epochs: list[int]

    @classmethod
    def of(cls, batch: IngestBatch) -> _Plan:
        first_seen: dict[str, int] = {}
        hour_numbers: set[int] = set()
        for series in batch.series:
            if series.ts:
                earliest = min(series.ts)
                if earliest < first_seen.get(series.uuid, earliest + 1):
                    first_seen[series.uuid] = earliest
                hour_numbers.update(set(map(_HOUR_OF, series.ts)))
        epochs = [to_epoch(reading.ts) for reading in batch.samples]
        for reading, ts in zip(batch.samples, epochs, strict=True):
            hour_numbers.add(ts // HOUR)
            if ts < first_seen.get(reading.uuid, ts + 1):
                first_seen[reading.uuid] = ts
        for share in batch.job_utilization:
            hour_numbers.add(share.ts // HOUR)
            if share.ts < first_seen.get(share.uuid, share.ts + 1):
                first_seen[share.uuid] = share.ts
        return cls(first_seen, hour_numbers, epochs)

    def rows(self, batch: IngestBatch, gpu_ids: dict[str, int], fields: Sequence[str]) -> Iterator[tuple[Any, ...]]:
        """The batch's ``gpu_samples`` rows (``gpu_id``, ``ts``, then the reading ``fields``), series first. A series
        left without readings (all malformed or untimely, or none sent) has none, and its GPU, if new, no id."""
        yield from chain.from_iterable(_series_rows(s, gpu_ids[s.uuid], fields) for s in batch.series if s.ts)
        for r, ts in zip(batch.samples, self.epochs, strict=True):
            yield (gpu_ids[r.uuid], ts, *(getattr(r, name) for name in fields))


@dataclass(frozen=True, slots=True)
class _Registered:
    """A GPU that a batch of the same transaction registers, as the GPU rows :meth:`Ingestor.conflicts` reads."""

    uuid: str
    gpu_index: int
    model: str
    hostname: str


def _batch_conflicts(
    batch: IngestBatch, by_uuid: dict[str, Any], by_slot: dict[int, Any], max_gpus_per_node: int | None
) -> tuple[dict[str, str], set[str]]:
    """:meth:`Ingestor.conflicts` of one batch, from the rows of the GPUs it names (``by_uuid``) and of its node's
    GPUs by index (``by_slot``)."""
    entries = {info.uuid: info for info in batch.gpus}
    uuids = batch.gpu_uuids
    new_at: dict[int, list[str]] = defaultdict(list)
    for uuid, info in sorted(entries.items()):
        if uuid not in by_uuid:
            new_at[info.index].append(uuid)
    refused: dict[str, str] = {}
    for uuid in sorted(uuids):
        known, entry = by_uuid.get(uuid), entries.get(uuid)
        if known is not None and known.hostname != batch.node:
            refused[uuid] = f"{uuid} belongs to node {known.hostname}"
        elif known is not None and entry is not None and entry.model != known.model:
            refused[uuid] = (
                f"{uuid} is registered as {known.model}, not {entry.model}; a GPU changes model only by "
                f"`gpu-finops nodes gpu replace {batch.node} {known.gpu_index}`"
            )
        elif known is None and entry is not None and entry.index in by_slot:
            holder = by_slot[entry.index].uuid
            refused[uuid] = (
                f"index {entry.index} of node {batch.node} is {holder}; after a hardware swap run "
                f"`gpu-finops nodes gpu replace {batch.node} {entry.index}`"
            )
        elif known is None and entry is not None and len(new_at[entry.index]) > 1:
            refused[uuid] = (
                f"index {entry.index} of node {batch.node} is claimed by {', '.join(new_at[entry.index])}, none of "
                "them known, in one batch: a node has one GPU at an index"
            )
        elif known is None and entry is not None and max_gpus_per_node is not None and entry.index >= max_gpus_per_node:
            refused[uuid] = (
                f"index {entry.index} of node {batch.node} is past the {max_gpus_per_node} GPUs a node may have "
                "(FINOPS_INGEST_MAX_GPUS_PER_NODE: indices 0 to "
                f"{max_gpus_per_node - 1}); raise it if the node has more GPUs"
            )
    return refused, uuids - set(entries) - {uuid for uuid in uuids if uuid in by_uuid} - set(refused)


def _series_rows(series: GpuSeries, gpu_id: int, fields: Sequence[str]) -> Iterator[tuple[Any, ...]]:
    n = len(series.ts)
    columns: list[Iterable[Any]] = [repeat(gpu_id, n), series.ts]
    for name in fields:
        column = getattr(series, name)
        columns.append(repeat(None, n) if column is None else column)
    return zip(*columns, strict=False)


class Ingestor:
    """Stores batches; keeps a cache of known GPUs and of existing day partitions so that a steady stream costs
    no inventory or catalog queries.

    One instance per process. ``store`` is idempotent: a sample is unique on (GPU, timestamp) and a
    replayed batch adds no rows.
    """

    def __init__(self) -> None:
        self._gpus: dict[str, _KnownGpu] = {}
        self._partitions = PartitionCache()

    def store(self, session: Session, batch: IngestBatch) -> int:
        """Store ``batch`` in the caller's transaction; returns how many readings it carried (those already stored
        included).

        Registers the batch's GPUs (nodes and GPUs by insert-or-ignore, so collectors registering the same new GPU
        at once both succeed), moves a GPU's ``in_service_from`` back to its earliest reading, marks the UTC hours
        the readings fall in, and those it moves back over, dirty for the ledger. The batch's ``job_utilization``
        entries go to ``gpu_job_utilization`` by insert-or-ignore (unique on GPU, instant and job), their instants
        counting as readings' for the GPU's registration and the dirty hours; they are not counted in the return
        value. Its ``node_io`` entries are folded into the node's hours (:func:`finops.ingest.node_io.store_node_io`,
        after the samples: one lock order with the retention job) when the batch stored readings.
        Readings of a GPU missing from both the batch's ``gpus`` and the database raise KeyError naming it. What
        this instance caches about GPUs is updated only once the transaction commits, so a rolled-back batch leaves
        no trace in it.

        On PostgreSQL, locks are taken in one order, ``gpu_samples`` first, so that a transaction making a day
        partition and one registering GPUs or marking hours cannot deadlock: missing partitions are made first,
        and ``gpu_samples`` is taken in ROW EXCLUSIVE mode before ``gpus`` or ``ledger_dirty_hours`` is written.
        The dirty hours, the lock and the savepoint of the sample insert travel in one round trip, with the record of
        each GPU's earliest reading stored that the ledger's rollup reads to tell late readings
        (:func:`finops.ledger.metering_state.arrival_statement`). When a reading
        carries a hardware activity field, the batch's hours are marked in ``profiled_hours`` too (same round trip),
        and the rows carry the activity columns; otherwise those columns are left out of the ``COPY`` (NULL).
        """
        return self.store_all(session, [batch])[0]

    def store_all(self, session: Session, batches: Sequence[IngestBatch]) -> list[int]:
        """Store ``batches`` in the caller's transaction as :meth:`store` stores one, their readings by one ``COPY``
        (the partitions, the lock and the dirty hours of all in one round trip); returns how many readings each
        carried, in their order. Their GPUs are registered node by node in the order of the nodes' names, one order
        in every transaction. Used by ingest to commit the batches of concurrent requests together
        (:class:`finops.ingest.group_commit.GroupCommit`). What a GPU package reports once is first split over its
        devices (:func:`finops.ingest.package_split.split_packages`)."""
        batches = [split_packages(batch) for batch in batches]
        plans = [_Plan.of(batch) for batch in batches]
        hours = {number * HOUR for plan in plans for number in plan.hour_numbers}
        counts = [0] * len(batches)
        if not hours:
            return counts
        days = {hour - hour % DAY for hour in hours}
        self._partitions.ensure(session, days)
        gpu_ids: list[dict[str, int]] = [{} for _ in batches]
        for i in sorted(range(len(batches)), key=lambda k: batches[k].node):
            if plans[i].first_seen:
                gpu_ids[i] = self.register(session, batches[i].node, batches[i].gpus, plans[i].first_seen)
        profiled = _carries_activity(batches)
        fields = READING_COLUMNS if profiled else UNPROFILED_READING_COLUMNS
        rows: list[tuple[Any, ...]] = []
        for i, (batch, plan) in enumerate(zip(batches, plans, strict=True)):
            before = len(rows)
            rows.extend(plan.rows(batch, gpu_ids[i], fields))
            counts[i] = len(rows) - before
        marks: list[str | None] = [_mark_hours(DirtyHour.__tablename__, hours)]
        if profiled:
            marks.append(_mark_hours(ProfiledHour.__tablename__, hours))
        earliest: dict[int, int] = {}
        for plan, ids in zip(plans, gpu_ids, strict=True):
            for uuid, ts in plan.first_seen.items():
                if ts < earliest.get(ids[uuid], ts + 1):
                    earliest[ids[uuid]] = ts
        marks.append(arrival_statement(session.connection().dialect.name, earliest))
        first = [statement for statement in (self._partitions.lock_statement(), *marks) if statement]
        self._insert(session, ("gpu_id", "ts", *fields), rows, days, first)
        shares = [
            (ids[j.uuid], j.ts, j.job_id, j.utilization_ratio)
            for batch, ids in zip(batches, gpu_ids, strict=True)
            for j in batch.job_utilization
        ]
        if shares:
            table: Any = GpuJobUtilization.__table__
            bulk_insert_ignoring_conflicts(session, table, JOB_UTILIZATION_COLUMNS, shares)
        for batch, plan in zip(batches, plans, strict=True):
            if batch.node_io and plan.first_seen:
                store_node_io(session, batch.node, batch.node_io)
        return counts

    def conflicts(
        self, session: Session, batches: Sequence[IngestBatch], max_gpus_per_node: int | None = None
    ) -> list[tuple[dict[str, str], set[str]]]:
        """What each of ``batches`` may not write: per batch, in their order, (UUIDs refused, each with the reason;
        UUIDs unknown). One query finds the GPUs the batches name; a second, the GPUs of the nodes of the batches
        that describe a GPU the first did not find (a new GPU, whose index another may hold), only when there is one.

        Refused: a GPU registered to another node ("belongs to node X"), or a ``gpus`` entry that would re-register
        a GPU of the batch's node, its index under another UUID or its UUID as another model (only ``gpu-finops nodes
        gpu replace NODE INDEX`` frees a slot for a new board), or register a new GPU at an index of
        ``max_gpus_per_node`` or above (None: no bound; a node is unique on its GPUs' indices, so this bounds its GPUs;
        GPUs registered before keep their readings), or register two new GPUs at one index of a batch (both are
        refused: which one is at the index cannot be told). A slot whose UUID is unknown (a job placement's
        placeholder) may be taken. Unknown: GPUs with readings that neither the batch's ``gpus`` describe nor the
        database knows (what :meth:`store` would refuse with KeyError). Batches are judged in their order, each as if
        those before it were stored: a new GPU a batch registers belongs to its node and holds its index for the
        batches after it (without this, a second node describing it wrote its readings onto the first node's GPU,
        and a second new GPU at the index took over the first's row).

        The same rows keep this instance's cache of GPUs true to the database, which other processes change: a
        cached UUID the database no longer has (``gpu-finops nodes gpu replace`` released its slot) or has under
        another GPU is forgotten, so the batch registers it again instead of writing to the slot it left."""
        uuids = sorted(set().union(*(batch.gpu_uuids for batch in batches)))
        connection = session.connection()
        dialect = connection.dialect.name
        by_uuid: dict[str, Any] = {row.uuid: row for row in connection.execute(_BY_UUID[dialect], {"uuids": uuids})}
        by_slot: dict[str, dict[int, Any]] = defaultdict(dict)
        new_on = sorted({batch.node for batch in batches if any(info.uuid not in by_uuid for info in batch.gpus)})
        if new_on:
            for row in connection.execute(_BY_NODE[dialect], {"nodes": new_on}):
                if row.uuid is not None:  # a slot without a UUID (a job placement's placeholder) may be taken
                    by_slot[row.hostname][row.gpu_index] = row
        for uuid in uuids:
            cached, found = self._gpus.get(uuid), by_uuid.get(uuid)
            if cached is not None and (found is None or found.id != cached.gpu_id):
                self._gpus.pop(uuid, None)
        found = []
        for batch in batches:  # a GPU a batch registers is known to the batches after it, as once committed
            refused, unknown = _batch_conflicts(batch, by_uuid, by_slot[batch.node], max_gpus_per_node)
            found.append((refused, unknown))
            for info in batch.gpus:
                if info.uuid not in by_uuid and info.uuid not in refused:
                    claimed = _Registered(info.uuid, info.index, info.model, batch.node)
                    by_uuid[info.uuid] = by_slot[batch.node][info.index] = claimed
        return found

    def _insert(
        self,
        session: Session,
        columns: Sequence[str],
        rows: list[tuple[Any, ...]],
        days: set[int],
        first: Sequence[str],
    ) -> None:
        table: Any = GpuSample.__table__
        try:
            bulk_insert_ignoring_conflicts(session, table, columns, rows, before=first)
        except psycopg.errors.CheckViolation:
            # "no partition of relation gpu_samples found for row": a cached partition is gone (dropped by the
            # retention job, or its creating transaction rolled back). Ask the catalog again and retry once.
            self._partitions.forget()
            self._partitions.ensure(session, days)
            bulk_insert_ignoring_conflicts(session, table, columns, rows)

    def register(
        self, session: Session, hostname: str, inventory: list[GpuInfo], first_seen: dict[str, int]
    ) -> dict[str, int]:
        """The GPUs of ``first_seen`` (UUID → epoch seconds of its earliest reading) on node ``hostname``, registered
        where unknown (at their ``inventory`` entry's index, model and memory; KeyError for one without an entry),
        each one's ``in_service_from`` moved back to its earliest reading (the hours it moves back over marked dirty
        for the ledger); returns UUID → ``gpus.id``. What
        :meth:`store` does for a batch's GPUs, also used for GPUs found in a TSDB
        (:meth:`finops.ingest.tsdb_source.TsdbTelemetry.discover`)."""
        uuids = sorted(first_seen)  # one order in every transaction: concurrent registrations cannot deadlock
        unknown = [uuid for uuid in uuids if uuid not in self._gpus]
        if unknown or any(first_seen[uuid] < self._gpus[uuid].in_service_from for uuid in uuids if uuid in self._gpus):
            self._partitions.lock_parent(session)
        changed: dict[str, _KnownGpu] = {}
        if unknown:
            infos = {info.uuid: info for info in inventory}
            changed.update(self._load_or_create(session, hostname, unknown, infos, first_seen))
        ids: dict[str, int] = {}
        for uuid in uuids:
            seen, known = first_seen[uuid], changed.get(uuid) or self._gpus[uuid]
            if seen < known.in_service_from:
                session.execute(update(Gpu).where(Gpu.id == known.gpu_id).values(in_service_from=seen))
                # The hours it now enters service earlier by: the ledger has built them without it, or in part.
                mark_hours_dirty(session, range(seen - seen % HOUR, known.in_service_from, HOUR))
                known = changed[uuid] = _KnownGpu(known.gpu_id, seen)
            ids[uuid] = known.gpu_id
        if changed:
            self._remember_on_commit(session, changed)
        return ids

    def _remember_on_commit(self, session: Session, changed: dict[str, _KnownGpu]) -> None:
        """Cache ``changed`` once the session's transaction commits; forget it if the transaction ends otherwise."""
        key = ("finops.ingest.readings.pending", id(self))
        pending: dict[str, _KnownGpu] | None = session.info.get(key)
        if pending is None:
            pending = session.info[key] = {}

            def committed(_session: Session) -> None:
                self._gpus.update(pending)

            def ended(_session: Session, transaction: SessionTransaction) -> None:
                if transaction.parent is None:
                    pending.clear()

            event.listen(session, "after_commit", committed)
            event.listen(session, "after_transaction_end", ended)
        pending.update(changed)

    @staticmethod
    def _load_or_create(
        session: Session, hostname: str, uuids: list[str], infos: dict[str, GpuInfo], first_seen: dict[str, int]
    ) -> dict[str, _KnownGpu]:
        """The GPUs of ``uuids`` (sorted): found, or registered on ``hostname`` at their ``infos`` index. A GPU
        already known at that slot (from a job's placement, or a replaced board) takes the UUID, model and
        memory; otherwise a new row enters service at its first reading, and the hours from it that the ledger
        was built over (up to its watermark) are marked dirty. Insert-or-ignore, then read: safe against a
        concurrent registration of the same GPUs."""

        def load(wanted: list[str]) -> dict[str, _KnownGpu]:
            query = select(Gpu.uuid, Gpu.id, Gpu.in_service_from).where(Gpu.uuid.in_(wanted))
            return {row.uuid: _KnownGpu(row.id, to_epoch(row.in_service_from)) for row in session.execute(query)}

        found = load(uuids)
        missing = [uuid for uuid in uuids if uuid not in found]
        if not missing:
            return found
        for uuid in missing:
            if uuid not in infos:
                raise KeyError(f"samples for GPU {uuid}, which is neither in the batch's gpus nor known")
        insert_ignoring_conflicts(session, Node.__table__, [{"hostname": hostname}])  # type: ignore[arg-type]
        node_id = session.scalars(select(Node.id).where(Node.hostname == hostname)).one()
        described = {
            uuid: {"uuid": uuid, "model": infos[uuid].model, "memory_total_bytes": infos[uuid].memory_total_bytes}
            for uuid in missing
        }
        rows = [
            {"node_id": node_id, "gpu_index": infos[uuid].index, "in_service_from": first_seen[uuid], **described[uuid]}
            for uuid in missing
        ]
        insert_ignoring_conflicts(session, Gpu.__table__, rows)  # type: ignore[arg-type]
        built = session.scalar(select(Watermark.value).where(Watermark.name == LEDGER_WATERMARK))
        if built is not None:  # the hours the ledger was built over without them since their first readings
            end = to_epoch(built)
            mark_hours_dirty(session, {h for uuid in missing for h in range(floor_hour(first_seen[uuid]), end, HOUR)})
        found.update(load(missing))
        for uuid in missing:
            if uuid not in found:  # the slot was known without this UUID: it takes it
                slot = (Gpu.node_id == node_id) & (Gpu.gpu_index == infos[uuid].index)
                session.execute(update(Gpu).where(slot).values(**described[uuid]))
                found.update(load([uuid]))
        return found
