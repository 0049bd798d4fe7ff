"""The hourly cost ledger: one row per GPU × UTC hour × holder, rebuilt for hours marked dirty.

A rebuild of hours [h0, h1) is one SQL aggregation over the samples (utilisation and energy per GPU, hour
and allocation) plus a Python pass over GPU-hours (not samples) that applies :mod:`finops.costmodel`.
Rebuilding an hour deletes and rewrites its rows, so recomputing changes nothing.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from sqlalchemy import bindparam, delete, func, select, text
from sqlalchemy.orm import Session

from finops import costmodel
from finops.models import UNALLOCATED_TEAM, Allocation, DirtyHour, Gpu, Job, LedgerEntry
from finops.prices import PriceCatalog, PriceNotFound, PricingModel
from finops.pricing_rules import pricing_models_by_node
from finops.teams import team_by_name
from finops.timeutil import HOUR, floor_hour, from_epoch, to_epoch

log = logging.getLogger(__name__)

CHUNK_HOURS = 24
ENERGY_LOOKBACK_SECONDS = HOUR

# Per GPU, hour and holding allocation (NULL: none): metered samples, Σ utilisation, Σ energy increments.
# An energy counter that goes down was reset (driver reload): the new reading is the energy since then.
# Bookings of one GPU never overlap, so the only allocation that can hold a sample is the latest one to
# start at or before it: one index seek per sample on (gpu_id, start). ``gpu_id IN (…)`` lets both
# databases range-scan the (gpu_id, ts) primary key per GPU instead of scanning the table.
_SAMPLE_AGGREGATE = text("""
WITH s AS (
    SELECT gpu_id, ts, utilization_ratio AS u, energy_joules AS e,
           energy_joules - LAG(energy_joules) OVER (PARTITION BY gpu_id ORDER BY ts) AS de
    FROM gpu_samples
    WHERE gpu_id IN (SELECT id FROM gpus) AND ts >= :lookback AND ts < :h1
), t AS (
    SELECT s.*, (SELECT a.id FROM allocations a WHERE a.gpu_id = s.gpu_id AND a.start <= s.ts
                 ORDER BY a.start DESC LIMIT 1) AS candidate
    FROM s WHERE s.ts >= :h0
)
SELECT t.gpu_id, t.ts - t.ts % 3600 AS hour, a.id AS allocation_id,
       COUNT(t.u) AS samples, COALESCE(SUM(t.u), 0) AS utilization_sum,
       COALESCE(SUM(CASE WHEN t.de IS NULL THEN 0 WHEN t.de < 0 THEN t.e ELSE t.de END), 0) AS energy
FROM t LEFT JOIN allocations a ON a.id = t.candidate AND (a."end" IS NULL OR t.ts < a."end")
GROUP BY t.gpu_id, t.ts - t.ts % 3600, a.id
""").bindparams(bindparam("lookback"), bindparam("h0"), bindparam("h1"))


@dataclass(frozen=True, slots=True)
class _Metering:
    samples: int
    utilization_sum: float
    energy_joules: float


@dataclass(frozen=True, slots=True)
class Pricing:
    """What a rebuild prices with: the catalog (rates, energy tariff, PUE) and the default pricing model of a GPU
    whose node no :class:`finops.models.PricingRule` selects."""

    catalog: PriceCatalog
    model: PricingModel


def rollup(session: Session, pricing: Pricing, until: int) -> int:
    """Bring the ledger up to ``until`` (epoch seconds): rebuild every dirty hour before it, and every hour
    from the newest hour in the ledger (or, for an empty ledger, the first GPU's entry into service) to it.

    The newest hour is always rebuilt because it was built only up to the previous ``until``, so hours
    without samples or job changes (a silent collector, an idle cluster) still accrue capacity cost.
    Hours missing a GPU that has no price stay dirty, so they are rebuilt after the catalog is fixed.
    Returns the number of hours rebuilt completely.
    """
    dirty = {to_epoch(h) for h in session.scalars(select(DirtyHour.hour).where(DirtyHour.hour < from_epoch(until)))}
    newest = session.scalar(select(func.max(LedgerEntry.hour))) or session.scalar(select(func.min(Gpu.in_service_from)))
    since = floor_hour(to_epoch(newest)) if newest is not None else floor_hour(until - 1)
    hours = sorted(dirty | set(range(min(since, floor_hour(until - 1)), until, HOUR)))
    rebuilt = 0
    for h0, h1 in _contiguous_chunks(hours):
        unpriced = rebuild(session, h0, h1, pricing, until)
        done = [h for h in range(h0, h1, HOUR) if h not in unpriced]
        session.execute(delete(DirtyHour).where(DirtyHour.hour.in_([from_epoch(h) for h in done])))
        rebuilt += len(done)
    return rebuilt


def _contiguous_chunks(hours: list[int]) -> Iterator[tuple[int, int]]:
    """[h0, h1) runs of consecutive hours, at most CHUNK_HOURS long."""
    start = previous = None
    for hour in hours:
        if start is None or previous is None or hour != previous + HOUR or hour - start >= CHUNK_HOURS * HOUR:
            if start is not None and previous is not None:
                yield start, previous + HOUR
            start = hour
        previous = hour
    if start is not None and previous is not None:
        yield start, previous + HOUR


def rebuild(session: Session, h0: int, h1: int, pricing: Pricing, until: int) -> set[int]:
    """Rewrite the ledger rows of hours [h0, h1) (epoch seconds, hour-aligned), clipped at ``until``.

    A GPU whose model has no price in the catalog gets no rows (logged once per model); the other GPUs'
    rows are written. Returns the hours that miss such GPUs, to be rebuilt once the catalog has the price.
    """
    end = min(h1, until)
    gpus = session.scalars(select(Gpu).where(Gpu.in_service_from < from_epoch(end))).all()
    node_models = pricing_models_by_node(session, pricing.model)
    allocations = session.execute(
        select(
            Allocation.id,
            Allocation.gpu_id,
            Allocation.start,
            Allocation.end,
            Allocation.share_num,
            Allocation.share_den,
            Job.id,
            Job.team_id,
        )
        .join(Job, Job.id == Allocation.job_pk)
        .where(Allocation.start < from_epoch(end), (Allocation.end.is_(None)) | (Allocation.end > from_epoch(h0)))
    ).all()
    metering: dict[tuple[int, int], dict[int | None, _Metering]] = defaultdict(dict)
    for row in session.execute(_SAMPLE_AGGREGATE, {"lookback": h0 - ENERGY_LOOKBACK_SECONDS, "h0": h0, "h1": end}):
        metering[row.gpu_id, row.hour][row.allocation_id] = _Metering(row.samples, row.utilization_sum, row.energy)
    by_gpu: dict[int, list[_Booking]] = defaultdict(list)
    for allocation_id, gpu_id, start, stop, share_num, share_den, job_pk, team_id in allocations:
        stop_epoch = until if stop is None else min(to_epoch(stop), until)
        share = Fraction(share_num, share_den)
        by_gpu[gpu_id].append(_Booking(allocation_id, to_epoch(start), stop_epoch, share, job_pk, team_id))
    unallocated_team = team_by_name(session, UNALLOCATED_TEAM).id
    rows: list[dict[str, object]] = []
    unpriced: set[int] = set()
    unpriced_models: set[tuple[str, PricingModel]] = set()
    rates: dict[tuple[str, PricingModel, int], Decimal] = {}
    for gpu in gpus:
        in_service = max(h0, to_epoch(gpu.in_service_from))
        pricing_model = node_models.get(gpu.node_id, pricing.model)
        for hour in range(floor_hour(in_service), end, HOUR):
            lo, hi = max(hour, in_service), min(hour + HOUR, end)
            rate = rates.get((gpu.model, pricing_model, hour))
            if rate is None:
                try:
                    rate = pricing.catalog.rate(gpu.model, pricing_model, from_epoch(hour))
                except PriceNotFound as exc:
                    if (gpu.model, pricing_model) not in unpriced_models:
                        unpriced_models.add((gpu.model, pricing_model))
                        log.error("GPU-hours of model %r left out of the ledger: %s", gpu.model, exc)
                    unpriced.add(hour)
                    continue
                rates[gpu.model, pricing_model, hour] = rate
            rows.extend(
                _gpu_hour_rows(
                    gpu.id,
                    hour,
                    lo,
                    hi,
                    rate,
                    by_gpu[gpu.id],
                    metering.get((gpu.id, hour), {}),
                    unallocated_team,
                    pricing,
                    pricing_model,
                )
            )
    session.execute(delete(LedgerEntry).where(LedgerEntry.hour >= from_epoch(h0), LedgerEntry.hour < from_epoch(h1)))
    if rows:
        session.execute(LedgerEntry.__table__.insert(), rows)  # type: ignore[attr-defined]
    return unpriced


@dataclass(frozen=True, slots=True)
class _Booking:
    """An allocation as the rebuild sees it: epoch [start, end) clipped at the build time, share of the GPU."""

    allocation_id: int
    start: int
    end: int
    share: Fraction
    job_pk: int
    team_id: int


def _gpu_hour_rows(
    gpu_id: int,
    hour: int,
    lo: int,
    hi: int,
    rate: Decimal,
    allocations: list[_Booking],
    by_allocation: dict[int | None, _Metering],
    unallocated_team: int,
    pricing: Pricing,
    pricing_model: PricingModel,
) -> list[dict[str, object]]:
    """Ledger rows of one GPU for the in-service part [lo, hi) of one hour.

    A GPU-hour held by one whole-GPU allocation at a time is metered per allocation (the samples inside it).
    A shared GPU-hour (a MIG share, or allocations that overlap: time-slicing) is metered as a whole: every
    holder gets the GPU's mean utilisation, and the GPU-hour's energy is split in proportion to GPU-seconds.
    """
    held: list[tuple[_Booking, int]] = []
    for booking in allocations:
        seconds = min(booking.end, hi) - max(booking.start, lo)
        if seconds > 0:
            held.append((booking, seconds))
    weight = sum(Fraction(seconds) * booking.share for booking, seconds in held)
    shared = weight > hi - lo or any(booking.share != 1 for booking, _ in held)
    whole = _whole_gpu_hour(by_allocation) if shared else None
    holdings = []
    for booking, seconds in held:
        inside = whole if shared else by_allocation.get(booking.allocation_id)
        utilization = inside.utilization_sum / inside.samples if inside and inside.samples else None
        holdings.append(costmodel.Holding(booking.job_pk, seconds, utilization, booking.share))
    costs = costmodel.gpu_hour_costs(rate, hi - lo, holdings)
    rows: list[dict[str, object]] = []
    for i, cost in enumerate(costs):
        holder = held[i][0] if i < len(held) else None
        if whole is not None:
            metered: _Metering | None = whole
            joules = whole.energy_joules * cost.gpu_seconds / (hi - lo)
        else:
            metered = by_allocation.get(holder.allocation_id if holder is not None else None)
            joules = metered.energy_joules if metered else 0.0
        rows.append(
            {
                "hour": hour,
                "gpu_id": gpu_id,
                "job_pk": cost.job,
                "team_id": unallocated_team if holder is None else holder.team_id,
                "seconds": cost.gpu_seconds,
                "used_gpu_seconds": cost.used_gpu_seconds,
                "sample_count": metered.samples if metered else 0,
                "energy_joules": joules,
                "allocated_cost": cost.allocated,
                "used_cost": cost.used,
                "idle_cost": cost.idle,
                "energy_cost": costmodel.energy_cost(joules, pricing.catalog.tariff_per_kwh, pricing.catalog.pue),
                "currency": pricing.catalog.currency,
                "pricing_model": str(pricing_model),
            }
        )
    return rows


def _whole_gpu_hour(by_allocation: dict[int | None, _Metering]) -> _Metering | None:
    """All samples of one GPU-hour, whichever allocation they fell in."""
    if not by_allocation:
        return None
    parts = by_allocation.values()
    return _Metering(
        sum(m.samples for m in parts), sum(m.utilization_sum for m in parts), sum(m.energy_joules for m in parts)
    )
