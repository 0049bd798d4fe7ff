"""Storing collector batches: GPU inventory upsert, idempotent sample insert, dirty-hour marking."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from collector.wire import GpuInfo, IngestBatch
from finops.dialect import bulk_insert_ignoring_conflicts
from finops.hours import mark_hours_dirty
from finops.models import Gpu, GpuSample, Node
from finops.rows import get_or_create
from finops.timeutil import HOUR, from_epoch, to_epoch

SAMPLE_COLUMNS = (
    "gpu_id", "ts", "utilization_ratio", "memory_utilization_ratio", "memory_used_bytes", "power_watts",
    "energy_joules", "temperature_celsius", "sm_clock_hertz", "clocks_event_reasons", "job_id",
)  # fmt: skip


@dataclass(slots=True)
class _KnownGpu:
    gpu_id: int
    in_service_from: int


class Ingestor:
    """Stores batches; keeps a cache of known GPUs so a steady stream costs no inventory queries.

    One instance per process. ``store`` is idempotent: a sample is unique on (GPU, timestamp) and a
    replayed batch adds no rows.
    """

    def __init__(self) -> None:
        self._gpus: dict[str, _KnownGpu] = {}

    def store(self, session: Session, batch: IngestBatch) -> int:
        """Store ``batch`` in the caller's transaction; returns how many readings it carried.

        Readings of a GPU missing from both the batch's ``gpus`` and the database raise KeyError naming it.
        """
        first_seen: dict[str, int] = {}
        hours: set[int] = set()
        epochs = []
        for reading in batch.samples:
            ts = to_epoch(reading.ts)
            epochs.append(ts)
            hours.add(ts - ts % HOUR)
            if ts < first_seen.get(reading.uuid, ts + 1):
                first_seen[reading.uuid] = ts
        gpu_ids = self._register(session, batch.node, batch.gpus, first_seen)
        rows = [
            (
                gpu_ids[r.uuid], ts, r.utilization_ratio, r.memory_utilization_ratio, r.memory_used_bytes,
                r.power_watts, r.energy_joules, r.temperature_celsius, r.sm_clock_hertz, r.clocks_event_reasons,
                r.job_id,
            )
            for r, ts in zip(batch.samples, epochs, strict=True)
        ]  # fmt: skip
        bulk_insert_ignoring_conflicts(session, GpuSample.__table__, SAMPLE_COLUMNS, rows)  # type: ignore[arg-type]
        mark_hours_dirty(session, hours)
        return len(rows)

    def _register(
        self, session: Session, hostname: str, inventory: list[GpuInfo], first_seen: dict[str, int]
    ) -> dict[str, int]:
        infos = {info.uuid: info for info in inventory}
        ids: dict[str, int] = {}
        for uuid, seen in first_seen.items():
            known = self._gpus.get(uuid)
            if known is None:
                known = self._load_or_create(session, hostname, uuid, infos.get(uuid), seen)
                self._gpus[uuid] = known
            if seen < known.in_service_from:
                session.execute(update(Gpu).where(Gpu.id == known.gpu_id).values(in_service_from=seen))
                known.in_service_from = seen
            ids[uuid] = known.gpu_id
        return ids

    @staticmethod
    def _load_or_create(session: Session, hostname: str, uuid: str, info: GpuInfo | None, seen: int) -> _KnownGpu:
        gpu = session.scalars(select(Gpu).where(Gpu.uuid == uuid)).one_or_none()
        if gpu is None:
            if info is None:
                raise KeyError(f"samples for GPU {uuid}, which is neither in the batch's gpus nor known")
            node = get_or_create(session, Node, hostname=hostname)
            gpu = session.scalars(select(Gpu).where(Gpu.node_id == node.id, Gpu.gpu_index == info.index)).one_or_none()
            if gpu is None:
                gpu = Gpu(node_id=node.id, gpu_index=info.index, in_service_from=from_epoch(seen))
                session.add(gpu)
            gpu.uuid, gpu.model, gpu.memory_total_bytes = uuid, info.model, info.memory_total_bytes
            session.flush()
        return _KnownGpu(gpu.id, to_epoch(gpu.in_service_from))
