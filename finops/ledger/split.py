"""Step 6 of a ledger rebuild (:mod:`finops.ledger.rollup`): the GPU-hours that the SQL costing leaves to the Python
cost model (listed in ``tmp_ledger_split``: a partial in-service hour, a holding covering part of the hour, several
holdings, a MIG share) costed by :func:`finops.ledger.costmodel.gpu_hour_costs`, with their metering from
``tmp_ledger_metering`` and, for overlapping holdings, the jobs' own measured utilisation."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction

from sqlalchemy import Connection, select, text

from finops.db.models import Job
from finops.jobs.placement import job_keys
from finops.ledger import costmodel
from finops.ledger.job_utilization import job_utilization_by_gpu_hour
from finops.ledger.sql import ACTIVITIES
from finops.pricing.catalog import PriceCatalog, PricingModel


@dataclass(frozen=True, slots=True)
class _Metering:
    samples: int
    utilization_sum: float
    energy_joules: float
    readings: int = 0
    profiled: int = 0
    activity_sums: tuple[float, ...] = ()
    activity_counts: tuple[int, ...] = ()

    def activity_means(self) -> dict[str, float | None]:
        """Ledger column (``<activity>_ratio``) → mean over the readings that carried the activity, None where none
        did."""
        return {
            f"{name}_ratio": (total / count if count else None)
            for name, total, count in zip(ACTIVITIES, self.activity_sums, self.activity_counts, strict=True)
        }

    def profiled_seconds(self, seconds: int) -> int:
        """Of ``seconds`` metered by these readings, those with a profiling field: seconds × profiled ÷ readings,
        rounded up (so a holding with any profiled reading has a profiled second; integers as the SQL costing's)."""
        return -(-seconds * self.profiled // self.readings) if self.readings else 0


_NO_ACTIVITY: dict[str, float | None] = {f"{name}_ratio": None for name in ACTIVITIES}


# The GPU-hours to split, their holdings in allocation id order, and their metering.
_SPLIT_HOURS = text("""
SELECT sp.gpu_id, sp.hour, sp.shared, gh.lo, gh.hi, gh.model, gh.pricing_model,
       h.allocation_id, h.job_pk, h.team_id, h.start, h.stop, h.share_num, h.share_den
FROM tmp_ledger_split sp
JOIN tmp_ledger_gpu_hours gh ON gh.gpu_id = sp.gpu_id AND gh.hour = sp.hour
LEFT JOIN tmp_ledger_holdings h ON h.gpu_id = sp.gpu_id AND h.hour = sp.hour
ORDER BY sp.gpu_id, sp.hour, h.allocation_id
""")
# The service periods of the GPU-hours to split, clipped to the hour (step 1's tmp_ledger_service).
_SPLIT_SERVICE = text("""
SELECT s.gpu_id, s.hour, s.lo, s.hi
FROM tmp_ledger_service s JOIN tmp_ledger_split sp ON sp.gpu_id = s.gpu_id AND sp.hour = s.hour
""")
_SPLIT_METERING = text(
    f"""
SELECT m.gpu_id, m.hour, m.allocation_id, m.samples, m.utilization_sum, m.energy_joules, m.readings, m.profiled,
       {", ".join(f"m.{a}_sum, m.{a}_n" for a in ACTIVITIES)}
FROM tmp_ledger_metering m JOIN tmp_ledger_split sp ON sp.gpu_id = m.gpu_id AND sp.hour = m.hour
"""  # noqa: S608 - only constant SQL is inlined
)


@dataclass(frozen=True, slots=True)
class _Holding:
    """An allocation holding a GPU for [start, stop) of one hour: its share of the GPU, job and team."""

    allocation_id: int
    start: int
    stop: int
    share: Fraction
    job_pk: int
    team_id: int


@dataclass(slots=True)
class _GpuHour:
    gpu_id: int
    hour: int
    lo: int
    hi: int
    shared: bool
    rate: Decimal | None
    pricing_model: str
    holdings: list[_Holding]
    service: list[tuple[int, int]] = field(default_factory=list)

    def in_service(self) -> list[tuple[int, int]]:
        """The in-service stretches [a, b) of the hour, sorted and disjoint: the union of its service periods and
        its holdings (a GPU is in service while a job holds it)."""
        merged: list[tuple[int, int]] = []
        for a, b in sorted([*self.service, *((h.start, h.stop) for h in self.holdings)]):
            if merged and a <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], b))
            elif b > a:
                merged.append((a, b))
        return merged


def _in_service_before(stretches: list[tuple[int, int]], instant: int) -> int:
    """In-service seconds of ``stretches`` before ``instant``: where an instant lies on the GPU-hour's in-service
    time, its gaps left out."""
    return sum(min(b, instant) - a for a, b in stretches if a < instant)


def split_rows(
    connection: Connection,
    rates: dict[tuple[str, PricingModel, int], Decimal | None],
    unallocated_team: int,
    catalog: PriceCatalog,
    h0: int,
    h1: int,
) -> list[dict[str, object]]:
    """Ledger rows (column name → value, :data:`finops.ledger.sql.LEDGER_COLUMNS`) of the GPU-hours in
    ``tmp_ledger_split`` of the chunk [h0, h1) (epoch seconds), by the Python cost model: ``rates`` are the prices
    per GPU-hour by GPU model, pricing model and hour (every split GPU-hour has one; None: the model has no price, and
    its rows are unpriced: GPU-seconds and metering split as usual, allocated, used and idle cost None), unallocated
    time goes to team id ``unallocated_team``, energy is costed at ``catalog``'s tariff and PUE in its currency."""
    gpu_hours: dict[tuple[int, int], _GpuHour] = {}
    for r in connection.execute(_SPLIT_HOURS):
        gpu_hour = gpu_hours.get((r.gpu_id, r.hour))
        if gpu_hour is None:
            rate = rates[r.model, PricingModel(r.pricing_model), r.hour]
            gpu_hour = _GpuHour(r.gpu_id, r.hour, r.lo, r.hi, bool(r.shared), rate, r.pricing_model, [])
            gpu_hours[r.gpu_id, r.hour] = gpu_hour
        if r.allocation_id is not None:
            share = Fraction(r.share_num, r.share_den)
            gpu_hour.holdings.append(_Holding(r.allocation_id, r.start, r.stop, share, r.job_pk, r.team_id))
    for piece in connection.execute(_SPLIT_SERVICE):
        gpu_hours[piece.gpu_id, piece.hour].service.append((piece.lo, piece.hi))
    metering: dict[tuple[int, int], dict[int | None, _Metering]] = defaultdict(dict)
    for m in connection.execute(_SPLIT_METERING):
        metering[m.gpu_id, m.hour][m.allocation_id] = _Metering(
            m.samples,
            m.utilization_sum,
            m.energy_joules,
            m.readings,
            m.profiled,
            tuple(m[8 + 2 * i] for i in range(len(ACTIVITIES))),
            tuple(m[9 + 2 * i] for i in range(len(ACTIVITIES))),
        )
    usage = _job_usage(connection, gpu_hours, h0, h1)
    rows: list[dict[str, object]] = []
    for key, gpu_hour in gpu_hours.items():
        rows.extend(_gpu_hour_rows(gpu_hour, metering.get(key, {}), unallocated_team, catalog, usage.get(key, {})))
    return rows


def _job_usage(
    connection: Connection, gpu_hours: dict[tuple[int, int], _GpuHour], h0: int, h1: int
) -> dict[tuple[int, int], dict[int, float]]:
    """``{(gpu_id, hour): {job_pk: usage}}`` for the shared GPU-hours with several holdings whose jobs' own
    utilisation the collectors measured (:func:`finops.ledger.job_utilization.job_utilization_by_gpu_hour`, matched to
    jobs by :func:`finops.jobs.placement.job_keys`); none read when no such GPU-hour is in the chunk."""
    shared = [key for key, gpu_hour in gpu_hours.items() if gpu_hour.shared and len(gpu_hour.holdings) > 1]
    if not shared:
        return {}
    measured = job_utilization_by_gpu_hour(connection, h0, h1)
    wanted = {key: measured[key] for key in shared if key in measured}
    if not wanted:
        return {}
    job_pks = {holding.job_pk for key in wanted for holding in gpu_hours[key].holdings}
    keys = {
        row.id: job_keys(row.scheduler, row.job_id, row.job_id_raw)
        for row in connection.execute(
            select(Job.id, Job.scheduler, Job.job_id, Job.job_id_raw).where(Job.id.in_(job_pks))
        )
    }
    usage: dict[tuple[int, int], dict[int, float]] = {}
    for key, ratios in wanted.items():
        for job_pk in {holding.job_pk for holding in gpu_hours[key].holdings}:
            found = [ratios[k] for k in sorted(keys.get(job_pk, ())) if k in ratios]
            if found:
                usage.setdefault(key, {})[job_pk] = found[0]
    return usage


def _gpu_hour_rows(
    gpu_hour: _GpuHour,
    by_allocation: dict[int | None, _Metering],
    unallocated_team: int,
    catalog: PriceCatalog,
    usage: Mapping[int, float],
) -> list[dict[str, object]]:
    """Ledger rows of one GPU for the in-service part of one hour (:meth:`_GpuHour.in_service`: its in-service
    seconds are the capacity; a holding's offset is its place on them, the gaps left out).

    A GPU-hour held by disjoint whole-GPU holdings is metered per holding (the readings inside it; the rest
    under None). A shared GPU-hour (a MIG share, or holdings that overlap: time-slicing) is metered as a whole
    (under None): every holder gets the GPU's mean utilisation and hardware activity, and the hour's energy is split
    in proportion to GPU-seconds. A holder's ``profiled_seconds`` are its GPU-seconds × the share of its readings
    with a profiling field; the unallocated rest has no activity (NULL) and no profiled seconds. Holdings go to the
    cost model with their place in the hour and, by job, the ``usage`` measured for the job on this GPU-hour
    (:func:`_job_usage`), which split overlapping holdings.
    """
    held = gpu_hour.holdings
    stretches = gpu_hour.in_service()
    whole = by_allocation.get(None) if gpu_hour.shared else None
    holdings = []
    for holding in held:
        inside = whole if gpu_hour.shared else by_allocation.get(holding.allocation_id)
        utilization = inside.utilization_sum / inside.samples if inside and inside.samples else None
        holdings.append(
            costmodel.Holding(
                holding.job_pk,
                holding.stop - holding.start,
                utilization,
                holding.share,
                offset=_in_service_before(stretches, holding.start),
                usage=usage.get(holding.job_pk),
            )
        )
    span = sum(b - a for a, b in stretches)
    priced = gpu_hour.rate is not None
    # An unpriced GPU-hour is split at rate 0: the GPU-seconds split does not depend on the rate; its money is None.
    costs = costmodel.gpu_hour_costs(Decimal(0) if gpu_hour.rate is None else gpu_hour.rate, span, holdings)
    rows: list[dict[str, object]] = []
    for i, cost in enumerate(costs):
        holder = held[i] if i < len(held) else None
        if whole is not None:
            metered: _Metering | None = whole
            joules = whole.energy_joules * cost.gpu_seconds / span
        else:
            metered = by_allocation.get(holder.allocation_id if holder is not None else None)
            joules = metered.energy_joules if metered else 0.0
        activity = metered.activity_means() if metered and holder is not None else _NO_ACTIVITY
        sm_active = activity["sm_active_ratio"]
        rows.append(
            {
                "hour": gpu_hour.hour,
                "gpu_id": gpu_hour.gpu_id,
                "job_pk": cost.job,
                "team_id": unallocated_team if holder is None else holder.team_id,
                "seconds": cost.gpu_seconds,
                "used_gpu_seconds": cost.used_gpu_seconds,
                "sample_count": metered.samples if metered else 0,
                "energy_joules": joules,
                "allocated_cost": cost.allocated if priced else None,
                "used_cost": cost.used if priced else None,
                "idle_cost": cost.idle if priced else None,
                "energy_cost": costmodel.energy_cost(joules, catalog.tariff_per_kwh, catalog.pue),
                "currency": catalog.currency,
                "pricing_model": gpu_hour.pricing_model,
                "profiled_seconds": metered.profiled_seconds(cost.gpu_seconds) if metered and holder else 0,
                **activity,
                "sm_active_cost": (
                    costmodel.used_cost(cost.allocated, sm_active) if priced and sm_active is not None else None
                ),
            }
        )
    return rows
