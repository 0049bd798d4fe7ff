"""What a ledger rollup wrote (GPU-seconds priced and unpriced by model, readings metered), as it counted it or as
the ledger's rows tell it.

:class:`ChunkBuilt` is what the rebuild of some hours wrote, :class:`RollupResult` what a whole rollup
(:func:`finops.ledger.rollup.rollup`) did, :func:`recount` the same read from the ledger rows of its hours, and
:func:`unpriced_fix` what to do about GPU-hours that have no price.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from finops.db.ledger_tables import LedgerEntry
from finops.db.models import Gpu
from finops.timeutil import from_epoch


def unpriced_fix(model: str) -> str:
    """What to do about GPU-hours of ``model`` that have no price (said the same way by the log, reports, the API
    and the dashboard)."""
    return f"add a price for {model!r} to your catalogue (gpu-finops prices import FILE) or set the node's model"


@dataclass(slots=True)
class ChunkBuilt:
    """What the rebuild of some hours wrote: in-service GPU-seconds by (GPU model, priced), why each unpriced
    model has no price (the catalog's PriceNotFound message), and how many readings it metered (those new to the
    kept sums: :mod:`finops.ledger.metering`)."""

    gpu_seconds: Counter[tuple[str, bool]] = field(default_factory=Counter)
    reasons: dict[str, str] = field(default_factory=dict)
    readings: int = 0

    def add(self, other: ChunkBuilt) -> None:
        """Fold ``other`` in: GPU-seconds added per model, the first reason kept for each unpriced model, readings
        added."""
        self.gpu_seconds.update(other.gpu_seconds)
        self.readings += other.readings
        for model, reason in other.reasons.items():
            self.reasons.setdefault(model, reason)


@dataclass(frozen=True, slots=True)
class RollupResult:
    """What :func:`finops.ledger.rollup.rollup` did: ``hours`` rebuilt, the GPU-seconds written with a price, those
    written unpriced (no price for the GPU's model: seconds and use kept, no money) by GPU model, the readings it
    metered (each reading is metered once: those new since the last rollup, and those of GPU-hours metered again)
    and the GPUs it found late readings of."""

    hours: int
    priced_gpu_seconds: int
    unpriced_gpu_seconds: dict[str, int]
    readings_metered: int = 0
    late_gpus: int = 0
    pending_hours: int = 0

    def then(self, later: RollupResult) -> RollupResult:
        """This result followed by ``later`` (the next transaction of the same rollup): counts added, the pending
        hours ``later``'s."""
        unpriced = dict(self.unpriced_gpu_seconds)
        for model, seconds in later.unpriced_gpu_seconds.items():
            unpriced[model] = unpriced.get(model, 0) + seconds
        return RollupResult(
            self.hours + later.hours,
            self.priced_gpu_seconds + later.priced_gpu_seconds,
            unpriced,
            self.readings_metered + later.readings_metered,
            self.late_gpus + later.late_gpus,
            later.pending_hours,
        )

    @property
    def priced_gpu_hours(self) -> float:
        """GPU-hours written with a price (seconds ÷ 3600, not rounded)."""
        return self.priced_gpu_seconds / 3600

    @property
    def unpriced_gpu_hours(self) -> float:
        """GPU-hours written unpriced, all models together (seconds ÷ 3600, not rounded)."""
        return sum(self.unpriced_gpu_seconds.values()) / 3600


def recount(session: Session, hours: Sequence[int], readings: int, late_gpus: int, pending: int) -> RollupResult:
    """What rolling up ``hours`` (epoch starts) wrote, read from their ledger rows as they are now: each hour and
    GPU-second once, for a transaction that rebuilt some of them twice (the scheduled rollup, after the job map moved
    jobs: :func:`finops.service.scheduler.run_rollup`), whose results added would count those twice. ``readings``,
    ``late_gpus`` and ``pending`` are what its rollups counted (:class:`RollupResult`)."""
    hours = sorted(set(hours))
    priced_row = LedgerEntry.allocated_cost.is_not(None)
    priced, unpriced = 0, dict[str, int]()
    for model, is_priced, seconds in session.execute(
        select(Gpu.model, priced_row, func.sum(LedgerEntry.seconds))
        .join(Gpu, Gpu.id == LedgerEntry.gpu_id)
        .where(LedgerEntry.hour.in_([from_epoch(hour) for hour in hours]))
        .group_by(Gpu.model, priced_row)
    ):
        if is_priced:
            priced += int(seconds)
        else:
            unpriced[model] = unpriced.get(model, 0) + int(seconds)
    return RollupResult(len(hours), priced, dict(sorted(unpriced.items())), readings, late_gpus, pending)
