"""One ingest batch from its body to stored readings, apart from HTTP (the route:
:class:`finops.web.ingest_route.IngestEndpoint`; :mod:`finops.web.app` states the ingest policy): decompression
within :data:`MAX_BODY_BYTES`, validation that leaves out each malformed reading and names it (``{"accepted": n,
"rejected": [...]}``), the node's time window, the per-node limits (:class:`Gate`), and storage through the group
commit, run again after a PostgreSQL deadlock."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread
import psycopg
import pydantic_core
from pydantic import ValidationError
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from collector.contract.wire import READING_COLUMNS, SIDE_PARTS, IngestBatch
from finops.ingest.group_commit import GroupCommit
from finops.ingest.limits import ReadingBuckets, TimeWindow
from finops.ingest.node_tokens import TokenHolder
from finops.ingest.readings import Ingestor
from finops.web.gzip_body import decompress

log = logging.getLogger(__name__)

DEADLOCK_ATTEMPTS = 3
"""Tries of an ingest transaction that PostgreSQL aborts to break a deadlock (it is then run again whole)."""


def _field_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def _batch_errors(errors: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The rejections of a batch refused as a whole: ``{"field", "error"}`` per validation error."""
    return [{"field": _field_path(e["loc"]) or "batch", "error": e["msg"]} for e in errors]


class Gate:
    """The per-node limits one batch goes through before it is stored (:meth:`admit`), and what they decided."""

    def __init__(self, buckets: ReadingBuckets, max_gpus: int) -> None:
        self.buckets, self.max_gpus = buckets, max_gpus
        self.refused: str | None = None
        """The ``gpufinops_ingest_refused_total`` reason the batch was refused for, if it was."""
        self.retry_after = 0
        """The 429's ``Retry-After`` seconds (0: not refused for its rate)."""
        self.taken = 0

    def admit(self, batch: IngestBatch) -> tuple[int, dict[str, Any]] | None:
        """None when ``batch`` may be stored (its rows taken from its node's bucket), else the answer refusing it
        whole: 422 for more GPUs than :attr:`max_gpus` or more rows than the burst (it can never pass), 429 when the
        bucket does not hold its rows now. Its rows are its readings and its ``job_utilization`` and ``node_io``
        entries, each stored too (the entries once passed free: one reading carried any number of them); refusals
        count its readings only, as collectors do."""
        uuids = batch.gpu_uuids
        readings = batch.reading_count
        rows = readings + len(batch.job_utilization) + len(batch.node_io)
        if len(uuids) > self.max_gpus:
            self.refused = "gpus"
            error = (
                f"the batch names {len(uuids)} GPUs, more than the {self.max_gpus} a batch may carry "
                "(FINOPS_INGEST_MAX_GPUS_PER_BATCH); a batch is one node's GPUs"
            )
            return 422, _refused_whole("gpus", error, readings)
        held = f"{readings} readings"
        if rows > readings:
            held += f" and {rows - readings} job_utilization and node_io entries"
        if not self.buckets.fits(rows):
            self.refused = "burst"
            error = (
                f"the batch holds {held}, more than a node may send at once ({self.buckets.burst}, "
                "FINOPS_INGEST_READINGS_BURST): it can never pass; send smaller batches"
            )
            return 422, _refused_whole("batch", error, readings)
        wait = self.buckets.take(batch.node, rows)
        if wait:
            self.refused, self.retry_after = "rate", wait
            detail = (
                f"node {batch.node!r} is over its ingest rate ({self.buckets.rate:g} readings/s, burst "
                f"{self.buckets.burst}; FINOPS_INGEST_READINGS_PER_SECOND, FINOPS_INGEST_READINGS_BURST): "
                f"{held} refused, nothing stored; retry in {wait} s"
            )
            return 429, {"detail": detail}
        self.taken = rows
        return None

    def give_back(self, node: str) -> None:
        """Return what :meth:`admit` took, the batch not having been stored."""
        if self.taken:
            self.buckets.give_back(node, self.taken)
            self.taken = 0


def _refused_whole(field: str, error: str, readings: int) -> dict[str, Any]:
    """The 422 answer's body for a batch refused whole by a limit, its readings counted (as collectors count them)."""
    rejected = [{"field": field, "error": error, "readings": readings}]
    return {"accepted": 0, "rejected": rejected, "detail": "batch rejected"}


Answer = tuple[int, dict[str, Any]]
"""An HTTP status and the answer's JSON."""
Untimely = Callable[[str, dict[str, int], str], None]
"""Told of a batch's readings refused for their time: ``(node, {reason: readings}, first refusal's text)``."""
_Stored = tuple[int, dict[str, str], set[str]]
"""What storing a batch gave: (readings stored, UUIDs refused with the reason, UUIDs unknown)."""


@dataclass(frozen=True, slots=True)
class Admitted:
    """A batch :func:`admit` let through: what to store (``batch``, without its readings refused so far), the
    rejections so far (``rejected``) and, of those, the readings refused for their time (``untimely``)."""

    batch: IngestBatch
    rejected: list[dict[str, Any]]
    untimely: list[dict[str, Any]]


def admit(
    body: bytes, window: TimeWindow, holder: TokenHolder | None = None, gate: Gate | None = None
) -> Admitted | Answer:
    """Validate one request body (JSON) and pass it through the per-node limits: the batch to store, or the answer
    refusing it. ``window``: the times a reading may have (others are refused one by one, each entry with its
    ``reason``: :data:`collector.contract.wire.UNTIMELY_REASONS`); ``holder``: the node token it came with (None: a
    token of every node), whose node the batch must be from; ``gate``: the per-node limits (None: none), whose
    readings :func:`ingest_batch` gives back if storing then fails. CPU only: tens of µs for a collector's cycle, up
    to about a second for :data:`MAX_BODY_BYTES`."""
    batch, rejected, origins = _validate(body)
    if batch is None:
        return (422 if rejected else 400), {"accepted": 0, "rejected": rejected, "detail": "batch rejected"}
    if holder is not None and batch.node != holder.node:
        return 403, {"detail": f"node token {holder.token_id} is for node {holder.node!r}, not {batch.node!r}"}
    if gate is not None and (refusal := gate.admit(batch)) is not None:
        return refusal
    batch, untimely = _outside_window(batch, origins, window)
    return Admitted(batch, rejected + untimely, untimely)


async def ingest_batch(
    commits: GroupCommit[IngestBatch, _Stored],
    body: bytes,
    gzipped: bool,
    window: TimeWindow,
    holder: TokenHolder | None = None,
    gate: Gate | None = None,
    on_untimely: Untimely | None = None,
    inline_bytes: int = 0,
) -> Answer:
    """One request body inflated (:func:`decompress`, when ``gzipped``), admitted (:func:`admit`) and stored (in a
    transaction shared with the requests being stored at the same moment: ``commits``); returns the HTTP status and
    the answer's JSON. Inflating and admitting run on the event loop for a body of at most ``inline_bytes`` (as
    sent, then as inflated), in a worker thread otherwise. ``on_untimely`` is told, before the batch is stored (in
    a worker thread: it writes), the node, the readings refused for their time per reason and the first refusal's
    text."""
    if gzipped:
        inflated = decompress(body) if len(body) <= inline_bytes else await anyio.to_thread.run_sync(decompress, body)
        if not isinstance(inflated, bytes):
            return inflated
        body = inflated
    if len(body) <= inline_bytes:
        admitted = admit(body, window, holder, gate)
    else:
        admitted = await anyio.to_thread.run_sync(admit, body, window, holder, gate)
    if not isinstance(admitted, Admitted):
        return admitted
    try:
        return await _store(commits, admitted, on_untimely)
    except BaseException:
        if gate is not None:
            gate.give_back(admitted.batch.node)
        raise


async def _store(
    commits: GroupCommit[IngestBatch, _Stored], admitted: Admitted, on_untimely: Untimely | None
) -> Answer:
    """Store an admitted batch; returns the HTTP status and the answer's JSON."""
    batch, rejected, untimely = admitted.batch, admitted.rejected, admitted.untimely
    if untimely and on_untimely is not None:
        counts = Counter[str]()
        for entry in untimely:
            counts[entry["reason"]] += int(entry.get("readings", 1))
        await anyio.to_thread.run_sync(on_untimely, batch.node, dict(counts), untimely[0]["error"])
    accepted, refused, unknown = await commits.submit(batch)
    if unknown or refused:
        unknown_error = "readings of GPU {}, which the batch's gpus do not describe and the service does not know"
        reasons = {uuid: unknown_error.format(uuid) for uuid in unknown} | refused
        rejected = rejected + _gpu_errors(batch, reasons)
    return (422 if rejected else 200), {"accepted": accepted, "rejected": rejected}


def store_together(
    sessions: sessionmaker[Session],
    ingestor: Ingestor,
    batches: Sequence[IngestBatch],
    max_gpus_per_node: int | None = None,
) -> list[_Stored]:
    """Store ``batches`` in one transaction, each without its GPUs that :meth:`Ingestor.conflicts` refuses (with
    ``max_gpus_per_node``) or does not know; run again whole (up to :data:`DEADLOCK_ATTEMPTS` times) when
    PostgreSQL chooses it as a deadlock victim. What :class:`GroupCommit` runs for the batches of concurrent
    requests."""
    attempt = 1
    while True:
        try:
            with sessions.begin() as session:
                found = ingestor.conflicts(session, batches, max_gpus_per_node)
                kept = [
                    _without_gpus(batch, unknown | set(refused)) if unknown or refused else batch
                    for batch, (refused, unknown) in zip(batches, found, strict=True)
                ]
                stored = ingestor.store_all(session, kept)
            return [(count, refused, unknown) for count, (refused, unknown) in zip(stored, found, strict=True)]
        except (OperationalError, psycopg.errors.DeadlockDetected) as exc:
            deadlock = isinstance(getattr(exc, "orig", exc), psycopg.errors.DeadlockDetected)
            if not deadlock or attempt == DEADLOCK_ATTEMPTS:
                raise
            log.info("ingest transaction chosen as a deadlock victim (attempt %d); running it again", attempt)
            attempt += 1


def _without_gpus(batch: IngestBatch, uuids: set[str]) -> IngestBatch:
    """``batch`` without the ``gpus`` entries, readings and ``job_utilization`` entries of ``uuids``."""
    return batch.model_copy(
        update={
            "gpus": [g for g in batch.gpus if g.uuid not in uuids],
            "series": [s for s in batch.series if s.uuid not in uuids],
            "samples": [r for r in batch.samples if r.uuid not in uuids],
            "job_utilization": [j for j in batch.job_utilization if j.uuid not in uuids],
        }
    )


def _gpu_errors(batch: IngestBatch, reasons: dict[str, str]) -> list[dict[str, Any]]:
    """One rejection per GPU of ``reasons`` (UUID -> why its readings were left out), with their number."""
    readings = dict.fromkeys(reasons, 0)
    for series in batch.series:
        if series.uuid in reasons:
            readings[series.uuid] += len(series.ts)
    for reading in batch.samples:
        if reading.uuid in reasons:
            readings[reading.uuid] += 1
    return [
        {"uuid": uuid, "field": "gpus", "error": reasons[uuid], "readings": count}
        for uuid, count in sorted(readings.items())
    ]


_SERIES_VALUES = frozenset({"ts", *READING_COLUMNS})


def _series_length(item: object) -> int:
    ts = item.get("ts") if isinstance(item, dict) else None
    return len(ts) if isinstance(ts, list) else 0


class _Origins:
    """Where the entries of a batch left after validation refused some stood in the body, so that later refusals
    name them by their place as sent. ``None`` lists: nothing was left out."""

    def __init__(
        self,
        rows: list[int] | None = None,
        series: list[int] | None = None,
        values: dict[int, set[int]] | None = None,
        sides: dict[str, list[int]] | None = None,
    ) -> None:
        self.rows, self.series, self.values, self.sides = rows, series, values or {}, sides or {}

    def row(self, index: int) -> int:
        return index if self.rows is None else self.rows[index]

    def side(self, part: str, index: int) -> int:
        """The place as sent of the ``index``-th entry left in side part ``part`` (one of :data:`SIDE_PARTS`)."""
        kept = self.sides.get(part)
        return index if kept is None else kept[index]

    def series_of(self, index: int) -> int:
        return index if self.series is None else self.series[index]

    def value(self, series: int, index: int) -> int:
        """The place in series ``series`` (as sent) of the ``index``-th value left in it."""
        gone = self.values.get(series)
        if not gone:
            return index
        return [k for k in range(index + len(gone) + 1) if k not in gone][index]


_AS_SENT = _Origins()


def _outside_window(
    batch: IngestBatch, origins: _Origins, window: TimeWindow
) -> tuple[IngestBatch, list[dict[str, Any]]]:
    """``batch`` without its readings and side entries (:data:`SIDE_PARTS`) stamped outside ``window``, and their
    rejections, named by their place as sent (``series[s].ts[k]``, ``samples[i].ts``, ``job_utilization[j].ts``,
    ``node_io[j].ts``)."""
    rejected: list[dict[str, Any]] = []
    update: dict[str, Any] = {}
    series = batch.series
    if any(s.ts and not (window.holds(min(s.ts)) and window.holds(max(s.ts))) for s in series):
        kept_series = []
        for position, item in enumerate(series):
            bad = [k for k, ts in enumerate(item.ts) if not window.holds(ts)]
            if not bad:
                kept_series.append(item)
                continue
            sent = origins.series_of(position)
            for k in bad:
                place, error, kind = origins.value(sent, k), window.reason(item.ts[k]), window.kind(item.ts[k])
                field = f"series[{sent}].ts[{place}]"
                rejected.append({"series": sent, "index": place, "field": field, "error": error, "reason": kind})
            gone = set(bad)
            columns = {
                name: [v for k, v in enumerate(getattr(item, name)) if k not in gone]
                for name in ("ts", *READING_COLUMNS)
                if getattr(item, name) is not None
            }
            kept_series.append(item.model_copy(update=columns))
        update["series"] = kept_series
    epochs = [int(r.ts.timestamp()) for r in batch.samples]
    if not all(map(window.holds, epochs)):
        update["samples"] = [r for r, ts in zip(batch.samples, epochs, strict=True) if window.holds(ts)]
        for position, ts in enumerate(epochs):
            if not window.holds(ts):
                sent = origins.row(position)
                entry = {"index": sent, "field": f"samples[{sent}].ts", "error": window.reason(ts)}
                rejected.append({**entry, "reason": window.kind(ts)})
    for part in SIDE_PARTS:
        entries = getattr(batch, part)
        if all(window.holds(e.ts) for e in entries):
            continue
        update[part] = [e for e in entries if window.holds(e.ts)]
        for position, side_entry in enumerate(entries):
            if not window.holds(side_entry.ts):
                sent = origins.side(part, position)
                field, error = f"{part}[{sent}].ts", window.reason(side_entry.ts)
                rejected.append({part: sent, "field": field, "error": error, "readings": 0,
                                 "reason": window.kind(side_entry.ts)})  # fmt: skip
    return (batch.model_copy(update=update) if update else batch), rejected


def _validate(body: bytes) -> tuple[IngestBatch | None, list[dict[str, Any]], _Origins]:
    """The batch with its valid readings, the rejected ones, and where what is left stood in the body; (None,
    errors, …) if the batch itself is bad."""
    try:
        return IngestBatch.model_validate_json(body), [], _AS_SENT
    except ValidationError as exc:
        errors = exc.errors()
    rejected: list[dict[str, Any]] = []
    bad_rows: set[int] = set()
    bad_values: dict[int, set[int]] = {}
    bad_series: dict[int, dict[str, Any]] = {}
    bad_sides: dict[str, set[int]] = {part: set() for part in SIDE_PARTS}
    every_side_bad: set[str] = set()
    bad_gpus: dict[int, dict[str, Any]] = {}
    for error in errors:
        loc, entry = error["loc"], {"field": _field_path(error["loc"]), "error": error["msg"]}
        if len(loc) >= 2 and loc[0] == "gpus" and isinstance(loc[1], int):
            bad_gpus.setdefault(loc[1], entry)
        elif loc and loc[0] in bad_sides:  # not a reading: reject the entry, keep the readings
            part = str(loc[0])
            if len(loc) >= 2 and isinstance(loc[1], int):
                rejected.append({part: loc[1], **entry, "readings": 0})
                bad_sides[part].add(loc[1])
            else:
                rejected.append({**entry, "readings": 0})
                every_side_bad.add(part)
        elif len(loc) >= 2 and loc[0] == "samples" and isinstance(loc[1], int):
            rejected.append({"index": loc[1], **entry})
            bad_rows.add(loc[1])
        elif len(loc) == 4 and loc[0] == "series" and isinstance(loc[1], int) and loc[2] in _SERIES_VALUES \
                and isinstance(loc[3], int):  # fmt: skip
            rejected.append({"series": loc[1], "index": loc[3], **entry})
            bad_values.setdefault(loc[1], set()).add(loc[3])
        elif len(loc) >= 2 and loc[0] == "series" and isinstance(loc[1], int):
            bad_series.setdefault(loc[1], {"series": loc[1], **entry})
        else:
            return None, _batch_errors(errors), _AS_SENT
    # Parsed as pydantic parsed it: Infinity/NaN literals and huge numbers (refused above, by field) load as floats,
    # large integers stay integers.
    data = pydantic_core.from_json(body, allow_inf_nan=True)
    series = data.get("series") or []
    for index, item in enumerate(series):
        # Unequal column lengths are judged only once every value passed: judge them here too.
        length = _series_length(item)
        for name in READING_COLUMNS:
            column = item.get(name) if isinstance(item, dict) else None
            if index not in bad_series and isinstance(column, list) and len(column) != length:
                message = f"Value error, {name} has {len(column)} values for {length} timestamps"
                bad_series[index] = {"series": index, "field": f"series[{index}]", "error": message}
    for index, entry in sorted(bad_series.items()):
        rejected.append({**entry, "readings": _series_length(series[index])})
    origins = _Origins(values=bad_values)
    refused_gpus: dict[str, dict[str, Any]] = {}
    for index, entry in sorted(bad_gpus.items()):
        gpu = data["gpus"][index]
        uuid = gpu.get("uuid") if isinstance(gpu, dict) else None
        if not isinstance(uuid, str):  # whose readings it describes cannot be told: the batch is refused
            return None, _batch_errors(errors), _AS_SENT
        refused_gpus.setdefault(uuid, entry)
    if bad_gpus:
        data["gpus"] = [gpu for index, gpu in enumerate(data["gpus"]) if index not in bad_gpus]
    if bad_rows:
        origins.rows = [i for i in range(len(data["samples"])) if i not in bad_rows]
        data["samples"] = [data["samples"][i] for i in origins.rows]
    for part, bad in bad_sides.items():
        if part in every_side_bad:
            del data[part]
        elif bad:
            origins.sides[part] = [i for i in range(len(data[part])) if i not in bad]
            data[part] = [data[part][i] for i in origins.sides[part]]
    if series:
        origins.series = [index for index in range(len(series)) if index not in bad_series]
        data["series"] = [_without(series[index], bad_values.get(index, set())) for index in origins.series]
    try:
        batch = IngestBatch.model_validate(data)
    except ValidationError as exc:  # not expected: whatever is left is refused as a whole
        return None, _batch_errors(exc.errors()), _AS_SENT
    if refused_gpus:
        rejected += _refused_entries(batch, refused_gpus)
        batch = _without_gpus(batch, set(refused_gpus))
    return batch, rejected, origins


def _refused_entries(batch: IngestBatch, entries: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One rejection per GPU whose ``gpus`` entry is malformed (UUID -> the entry's first error, ``{"field":
    "gpus[g].model", "error": …}``), with its readings in ``batch``: they are refused with it, as for a GPU refused
    by :meth:`finops.ingest.readings.Ingestor.conflicts`, since what the entry says (model, index, package) decides
    how they are stored and split."""
    counted = {r["uuid"]: r["readings"] for r in _gpu_errors(batch, dict.fromkeys(entries, ""))}
    return [{"uuid": uuid, **entry, "readings": counted[uuid]} for uuid, entry in entries.items()]


def _without(item: dict[str, Any], positions: set[int]) -> dict[str, Any]:
    """A series object without the readings at ``positions``."""
    if not positions:
        return item
    return {
        key: [v for k, v in enumerate(value) if k not in positions] if key in _SERIES_VALUES and isinstance(value, list)
        else value
        for key, value in item.items()
    }  # fmt: skip
