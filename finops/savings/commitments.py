"""Commitments from the ledger: per GPU model, the reserved quantity that costs least against the GPUs jobs held,
and for owned (on-prem) GPUs what a held GPU-hour cost against renting it on demand.

**Rented GPUs** (ledger rows of every pricing model but on-prem). The demand of a catalogue model in hour ``h`` is
the GPUs its jobs held: Σ ``seconds`` of its allocated rows (``job_pk`` set) ÷ 3,600, fractional with MIG shares
(the ledger's seconds are whole-GPU-equivalent). The series runs over the last ``days`` whole hours before ``end``,
from the model's first ledger hour when that is later (a younger fleet is not padded with empty hours); an hour
with no held GPU is 0. The GPU names reported for one model (``h100`` from a GRES type, ``NVIDIA H100 80GB HBM3``
from NVML) are one series (:meth:`finops.pricing.catalog.PriceCatalog.resolve`). Against it,
:mod:`finops.savings.commitment_cost` finds the committed quantity that costs least with the commitment at the
catalogue's reserved rate and the overflow at its on-demand rate, both as in force at ``end`` (a commitment is
bought at today's prices): its cost, its saving against holding every GPU-hour on demand (quantity 0), per
730-hour month, and the share of the committed GPU-hours that jobs used. Demand that is billed reserved or spot
today counts as demand like the rest: the question is what to commit, not how it is billed now.

When the catalogue has a spot rate for the model, a second plan sends the overflow to spot instead, its saving
also against every held GPU-hour on demand. Spot GPUs are interruptible (the provider reclaims them at short
notice), so that plan is an option for work that checkpoints and restarts, never the default.

**Owned GPUs** (ledger rows priced on-prem): their capacity cost over the window (every GPU-hour, held or not, at
the on-prem rate: amortised capex, energy, support) divided by the GPU-hours jobs held, beside the on-demand rate
of the same model (what renting exactly those held hours would have cost per hour): the buy-vs-rent figure. A
ratio below 1 means owning cost less than renting. The same cost per busy GPU-hour (the ledger's
``used_gpu_seconds``: held time × utilisation) is given too.

A model that cannot be analysed (not in the catalogue, no reserved or on-demand rate in force, ledger hours
without a price) is listed in :attr:`CommitmentReport.not_analysed` with the reason and the fix, never dropped.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from fractions import Fraction
from typing import Any, Literal

from sqlalchemy import and_, case, func, select
from sqlalchemy.orm import Session

from finops.db.hours import pending_hours
from finops.db.ledger_tables import LedgerEntry
from finops.db.models import Gpu
from finops.ledger.costmodel import CENT, SECONDS_PER_HOUR, quantize, round_exact
from finops.ledger.rollup_result import unpriced_fix
from finops.pricing.catalog import PriceCatalog, PriceNotFound, PricingModel
from finops.savings.commitment_cost import (
    HOURS_PER_MONTH,
    CommitmentOutcome,
    HourlyDemand,
    cost_curve,
    optimum,
    outcome,
)
from finops.timeutil import HOUR, floor_hour, from_epoch, to_epoch

DEFAULT_DAYS = 30
MAX_DAYS = 366
"""The longest window (days): a leap year."""
MAX_QUANTITY = 1_000_000
"""The largest committed quantity a "what if" takes (GPUs)."""
MAX_MODEL_LENGTH = 128
"""The longest GPU model name asked for (characters): the width of ``gpus.model``."""
SPOT_NOTE = (
    "spot GPUs are interruptible (the provider reclaims them at short notice): sending the overflow to spot suits "
    "only work that checkpoints and restarts"
)
Section = Literal["commitment", "on-prem"]


@dataclass(frozen=True, slots=True)
class ModelCommitment:
    """One catalogue model's rented demand over the window and its commitment plans.

    ``start``: the first hour of its series (the window's start, or the model's first ledger hour if later);
    ``best``: the quantity that costs least with the overflow on demand; ``spot_overflow``: the same with the
    overflow at the spot rate, its saving against all on demand too (None without a spot rate; see
    :data:`SPOT_NOTE`); ``what_if``: the quantity asked
    for, overflow on demand (None when none was asked). Rates in currency per GPU-hour, in force at the window's
    end."""

    model: str
    gpu_names: tuple[str, ...]
    start: datetime
    demand: HourlyDemand
    on_demand_rate: Decimal
    reserved_rate: Decimal
    spot_rate: Decimal | None
    best: CommitmentOutcome
    spot_overflow: CommitmentOutcome | None
    what_if: CommitmentOutcome | None

    @property
    def mean_gpus(self) -> float:
        """GPUs held on average over the series."""
        return self.demand.total_gpu_seconds / (self.demand.hours * SECONDS_PER_HOUR)

    def curve(self) -> list[tuple[int, Decimal]]:
        """``(committed GPUs, cost over the series)`` from 0 to the peak, overflow on demand
        (:func:`finops.savings.commitment_cost.cost_curve`); its lowest point is :attr:`best`."""
        return cost_curve(self.demand, self.reserved_rate, self.on_demand_rate)


@dataclass(frozen=True, slots=True)
class OnPremComparison:
    """One catalogue model's owned GPUs over the window against renting them on demand.

    ``capacity_cost``: the ledger's cost of every priced on-prem GPU-hour, held or not; ``capacity_gpu_seconds``,
    ``allocated_gpu_seconds`` (held by jobs) and ``used_gpu_seconds`` (held × utilisation) of the same rows;
    ``on_demand_rate``: the model's cloud on-demand rate in force at the window's end; ``unpriced_gpu_seconds``:
    on-prem GPU-seconds without a price, left out of the figures."""

    model: str
    gpu_names: tuple[str, ...]
    capacity_cost: Decimal
    capacity_gpu_seconds: int
    allocated_gpu_seconds: int
    used_gpu_seconds: float
    on_demand_rate: Decimal
    unpriced_gpu_seconds: int

    @property
    def cost_per_allocated_gpu_hour(self) -> Decimal | None:
        """Capacity cost ÷ GPU-hours held, rounded to 6 decimals; None when no job held one."""
        if self.allocated_gpu_seconds == 0:
            return None
        return round_exact(Fraction(self.capacity_cost) * SECONDS_PER_HOUR / self.allocated_gpu_seconds)

    @property
    def cost_per_used_gpu_hour(self) -> Decimal | None:
        """Capacity cost ÷ busy GPU-hours (held × utilisation), rounded to 6 decimals; None when none was busy."""
        if self.used_gpu_seconds <= 0:
            return None
        busy = Fraction(repr(self.used_gpu_seconds))
        return round_exact(Fraction(self.capacity_cost) * SECONDS_PER_HOUR / busy)

    @property
    def on_demand_cost(self) -> Decimal:
        """What renting the held GPU-hours on demand would have cost, rounded to 6 decimals."""
        return round_exact(Fraction(self.on_demand_rate) * Fraction(self.allocated_gpu_seconds, SECONDS_PER_HOUR))

    @property
    def allocated_ratio(self) -> float | None:
        """:attr:`cost_per_allocated_gpu_hour` ÷ the on-demand rate (below 1: owning cost less than renting)."""
        return _ratio(self.cost_per_allocated_gpu_hour, self.on_demand_rate)

    @property
    def used_ratio(self) -> float | None:
        """:attr:`cost_per_used_gpu_hour` ÷ the on-demand rate."""
        return _ratio(self.cost_per_used_gpu_hour, self.on_demand_rate)


def _ratio(cost: Decimal | None, rate: Decimal) -> float | None:
    return None if cost is None or rate == 0 else float(cost / rate)


@dataclass(frozen=True, slots=True)
class NotAnalysed:
    """A GPU model (a catalogue key, or the reported name when no catalogue model covers it) left out of a
    ``section`` (``commitment``: rented GPUs; ``on-prem``: owned ones), why, and what fixes it."""

    model: str
    section: Section
    reason: str
    fix: str


@dataclass(frozen=True, slots=True)
class CommitmentReport:
    """The commitment analysis of the window [start, end): rented models by saving per month (largest first),
    owned models by name, and the models left out. ``quantity``: the "what if" asked for, if any;
    ``ledger_hours_pending``: hours of the window waiting for a rollup (their demand may still change)."""

    start: datetime
    end: datetime
    currency: str
    quantity: int | None
    commitments: list[ModelCommitment]
    on_prem: list[OnPremComparison]
    not_analysed: list[NotAnalysed]
    ledger_hours_pending: int

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: the window, ``currency``, ``hours_per_month``, ``spot_note``, ``ledger_hours_pending``, and
        ``commitments`` (:func:`_commitment_dict`), ``on_prem`` (:func:`_on_prem_dict`), ``not_analysed``
        (``{model, section, reason, fix}``). Money as decimal text in cents, rates as the catalogue gives them,
        times ISO 8601 UTC."""
        return {
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "days": (self.end - self.start).days,
            "currency": self.currency,
            "rates_at": self.end.isoformat(),
            "hours_per_month": HOURS_PER_MONTH,
            "quantity": self.quantity,
            "spot_note": SPOT_NOTE,
            "ledger_hours_pending": self.ledger_hours_pending,
            "commitments": [_commitment_dict(c) for c in self.commitments],
            "on_prem": [_on_prem_dict(o) for o in self.on_prem],
            "not_analysed": [
                {"model": n.model, "section": n.section, "reason": n.reason, "fix": n.fix} for n in self.not_analysed
            ],
        }


def cents(amount: Decimal) -> str:
    """``amount`` rounded half-even to the cent, as text."""
    return str(quantize(amount, CENT))


def outcome_dict(plan: CommitmentOutcome) -> dict[str, Any]:
    """``{quantity, cost, saving, saving_per_month, utilisation, overflow_gpu_hours}`` of a plan: money in cents,
    utilisation a ratio (null for quantity 0)."""
    return {
        "quantity": plan.quantity,
        "cost": cents(plan.cost),
        "saving": cents(plan.saving),
        "saving_per_month": cents(plan.saving_per_month),
        "utilisation": None if plan.utilisation is None else round(plan.utilisation, 6),
        "overflow_gpu_hours": round(plan.overflow_gpu_seconds / SECONDS_PER_HOUR, 6),
    }


def _commitment_dict(c: ModelCommitment) -> dict[str, Any]:
    """A rented model: ``model``, ``gpu_names``, ``start``, ``hours``, ``gpu_hours`` held, ``mean_gpus``,
    ``peak_gpus``, the three rates (``spot_rate`` null without one), ``on_demand_cost`` (every held GPU-hour on
    demand), and the plans ``best``, ``spot_overflow`` and ``what_if`` (:func:`outcome_dict`, or null)."""
    return {
        "model": c.model,
        "gpu_names": list(c.gpu_names),
        "start": c.start.isoformat(),
        "hours": c.demand.hours,
        "gpu_hours": round(c.demand.total_gpu_seconds / SECONDS_PER_HOUR, 6),
        "mean_gpus": round(c.mean_gpus, 6),
        "peak_gpus": c.demand.peak_gpus,
        "on_demand_rate": str(c.on_demand_rate),
        "reserved_rate": str(c.reserved_rate),
        "spot_rate": None if c.spot_rate is None else str(c.spot_rate),
        "on_demand_cost": cents(c.best.baseline_cost),
        "best": outcome_dict(c.best),
        "spot_overflow": None if c.spot_overflow is None else outcome_dict(c.spot_overflow),
        "what_if": None if c.what_if is None else outcome_dict(c.what_if),
    }


def _on_prem_dict(o: OnPremComparison) -> dict[str, Any]:
    """An owned model: ``model``, ``gpu_names``, GPU-hours (``capacity``, ``allocated``, ``used``, ``unpriced``),
    ``capacity_cost``, ``on_demand_cost`` of the held hours, the costs per held and busy GPU-hour, the on-demand
    rate and the two ratios (null where a divisor is 0)."""
    per_allocated, per_used = o.cost_per_allocated_gpu_hour, o.cost_per_used_gpu_hour
    return {
        "model": o.model,
        "gpu_names": list(o.gpu_names),
        "capacity_gpu_hours": round(o.capacity_gpu_seconds / SECONDS_PER_HOUR, 6),
        "allocated_gpu_hours": round(o.allocated_gpu_seconds / SECONDS_PER_HOUR, 6),
        "used_gpu_hours": round(o.used_gpu_seconds / SECONDS_PER_HOUR, 6),
        "unpriced_gpu_hours": round(o.unpriced_gpu_seconds / SECONDS_PER_HOUR, 6),
        "capacity_cost": cents(o.capacity_cost),
        "on_demand_cost": cents(o.on_demand_cost),
        "cost_per_allocated_gpu_hour": None if per_allocated is None else cents(per_allocated),
        "cost_per_used_gpu_hour": None if per_used is None else cents(per_used),
        "on_demand_rate": str(o.on_demand_rate),
        "allocated_ratio": None if o.allocated_ratio is None else round(o.allocated_ratio, 6),
        "used_ratio": None if o.used_ratio is None else round(o.used_ratio, 6),
    }


def commitment_report(
    session: Session,
    catalog: PriceCatalog,
    end: datetime,
    days: int = DEFAULT_DAYS,
    *,
    model: str | None = None,
    quantity: int | None = None,
) -> CommitmentReport:
    """The analysis of the module docstring over the ``days`` whole hours before ``end`` (floored to its hour),
    with the rates of ``catalog`` in force at that hour. ``model``: only that GPU model (a catalogue key or any name
    the catalogue resolves to it, else a reported GPU name); ``quantity``: a "what if" commitment of that many GPUs
    of each rented model. ValueError for ``days`` outside 1..:data:`MAX_DAYS` or ``quantity`` outside
    0..:data:`MAX_QUANTITY`. One grouped read of the ledger rows of the window."""
    if not 1 <= days <= MAX_DAYS:
        raise ValueError(f"days must be 1 to {MAX_DAYS}, got {days}")
    if quantity is not None and not 0 <= quantity <= MAX_QUANTITY:
        raise ValueError(f"quantity must be 0 to {MAX_QUANTITY:,}, got {quantity}")
    stop = floor_hour(to_epoch(end))
    first = stop - days * 24 * HOUR
    wanted = None if model is None else catalog.resolve(model) or model
    rented_seconds, owned_sums = _read_window(session, first, stop)
    commitments, left_out = _rented(catalog, rented_seconds, stop, wanted, quantity)
    owned, owned_left_out = _owned(catalog, owned_sums, stop, wanted)
    return CommitmentReport(
        start=from_epoch(first),
        end=from_epoch(stop),
        currency=catalog.currency,
        quantity=quantity,
        commitments=sorted(commitments, key=lambda c: (-c.best.saving_per_month, c.model)),
        on_prem=sorted(owned, key=lambda o: o.model),
        not_analysed=[*left_out, *owned_left_out],
        ledger_hours_pending=pending_hours(session, from_epoch(first), from_epoch(stop)),
    )


_ON_PREM = str(PricingModel.ON_PREM)


def _by_model(catalog: PriceCatalog, names: Sequence[str], wanted: str | None) -> dict[str, list[str]]:
    """GPU names by the catalogue key covering them (a name no model covers: its own key), only ``wanted``'s."""
    groups: dict[str, list[str]] = defaultdict(list)
    for name in names:
        key = catalog.resolve(name) or name
        if wanted is None or key == wanted:
            groups[key].append(name)
    return groups


def _rate(catalog: PriceCatalog, key: str, pricing_model: PricingModel, at: datetime) -> Decimal | None:
    try:
        return catalog.rate(key, pricing_model, at)
    except PriceNotFound:
        return None


def _missing_rate(key: str, pricing_models: Sequence[PricingModel], at: datetime, section: Section) -> NotAnalysed:
    names = " and ".join(str(p) for p in pricing_models)
    rows = " and ".join(f"a {p} row" for p in pricing_models)
    return NotAnalysed(
        key,
        section,
        f"no {names} rate in force at {at.isoformat()} in the price catalogue",
        f"add {rows} for {key!r} to your catalogue (gpu-finops prices import FILE)",
    )


def _not_in_catalogue(name: str, section: Section) -> NotAnalysed:
    return NotAnalysed(name, section, "no price catalogue model covers this GPU name", unpriced_fix(name))


@dataclass(slots=True)
class _OwnedSums:
    """One GPU name's on-prem ledger rows of the window, summed: cost and seconds of the priced rows (all, held),
    busy seconds of the held ones, seconds without a price, and the currencies the rows are in."""

    cost: Decimal = Decimal(0)
    capacity: int = 0
    allocated: int = 0
    used: float = 0.0
    unpriced: int = 0
    currencies: set[str] = field(default_factory=set)


def _read_window(session: Session, first: int, stop: int) -> tuple[dict[str, dict[int, int]], dict[str, _OwnedSums]]:
    """One grouped read of the ledger hours [first, stop) by GPU name, hour and whether the rows are on-prem: the
    rented GPU-seconds held per name and hour (epoch), and the owned sums per name."""
    is_owned = LedgerEntry.pricing_model == _ON_PREM
    owned_row = case((is_owned, 1), else_=0).label("owned")
    priced = LedgerEntry.allocated_cost.is_not(None)
    allocated = LedgerEntry.job_pk.is_not(None)
    priced_held = and_(priced, allocated)
    rows = session.execute(
        select(
            Gpu.model,
            LedgerEntry.hour,
            owned_row,
            func.sum(case((allocated, LedgerEntry.seconds), else_=0)),
            func.sum(case((and_(priced, is_owned), LedgerEntry.allocated_cost))),
            func.sum(case((priced, LedgerEntry.seconds), else_=0)),
            func.sum(case((priced_held, LedgerEntry.seconds), else_=0)),
            func.sum(case((priced_held, LedgerEntry.used_gpu_seconds), else_=0.0)),
            func.sum(case((priced, 0), else_=LedgerEntry.seconds)),
            func.min(LedgerEntry.currency),
            func.max(LedgerEntry.currency),
        )
        .join(Gpu, Gpu.id == LedgerEntry.gpu_id)
        .where(LedgerEntry.hour >= from_epoch(first), LedgerEntry.hour < from_epoch(stop))
        .group_by(Gpu.model, LedgerEntry.hour, owned_row)
    ).all()
    rented: dict[str, dict[int, int]] = defaultdict(dict)
    owned: dict[str, _OwnedSums] = defaultdict(_OwnedSums)
    for name, hour, is_owned, held, cost, capacity, held_priced, used, unpriced, low, high in rows:
        if not is_owned:
            rented[name][to_epoch(hour)] = int(held)
            continue
        sums = owned[name]
        sums.cost += Decimal(0) if cost is None else Decimal(cost)
        sums.capacity += int(capacity)
        sums.allocated += int(held_priced)
        sums.used += float(used)
        sums.unpriced += int(unpriced)
        sums.currencies.update((low, high))
    return rented, owned


def _rented(
    catalog: PriceCatalog, by_name: dict[str, dict[int, int]], stop: int, wanted: str | None, quantity: int | None
) -> tuple[list[ModelCommitment], list[NotAnalysed]]:
    """Rented demand per catalogue model (module docstring) from the GPU-seconds held per GPU name and hour, and
    its plans; the models left out."""
    at = from_epoch(stop)
    plans: list[ModelCommitment] = []
    left_out: list[NotAnalysed] = []
    for key, names in sorted(_by_model(catalog, list(by_name), wanted).items()):
        if key not in catalog.models:
            left_out.extend(_not_in_catalogue(name, "commitment") for name in names)
            continue
        on_demand, reserved = (_rate(catalog, key, p, at) for p in (PricingModel.ON_DEMAND, PricingModel.RESERVED))
        if on_demand is None or reserved is None:
            missing = [
                p for p, r in ((PricingModel.ON_DEMAND, on_demand), (PricingModel.RESERVED, reserved)) if r is None
            ]
            left_out.append(_missing_rate(key, missing, at, "commitment"))
            continue
        hourly: dict[int, int] = defaultdict(int)
        for name in names:
            for hour, seconds in by_name[name].items():
                hourly[hour] += seconds
        series_start = min(hourly)
        demand = HourlyDemand(hourly.get(hour, 0) for hour in range(series_start, stop, HOUR))
        spot = _rate(catalog, key, PricingModel.SPOT, at)
        plans.append(
            ModelCommitment(
                model=key,
                gpu_names=tuple(sorted(names)),
                start=from_epoch(series_start),
                demand=demand,
                on_demand_rate=on_demand,
                reserved_rate=reserved,
                spot_rate=spot,
                best=optimum(demand, reserved, on_demand),
                spot_overflow=None if spot is None else optimum(demand, reserved, spot, on_demand),
                what_if=None if quantity is None else outcome(demand, quantity, reserved, on_demand),
            )
        )
    return plans, left_out


def _owned(
    catalog: PriceCatalog, by_name: dict[str, _OwnedSums], stop: int, wanted: str | None
) -> tuple[list[OnPremComparison], list[NotAnalysed]]:
    """Owned GPUs per catalogue model against the on-demand rate (module docstring), from the sums per GPU name;
    the models left out."""
    at = from_epoch(stop)
    compared: list[OnPremComparison] = []
    left_out: list[NotAnalysed] = []
    for key, names in sorted(_by_model(catalog, list(by_name), wanted).items()):
        if key not in catalog.models:
            left_out.extend(_not_in_catalogue(name, "on-prem") for name in names)
            continue
        parts = [by_name[name] for name in names]
        capacity = sum(p.capacity for p in parts)
        currencies = set().union(*(p.currencies for p in parts))
        on_demand = _rate(catalog, key, PricingModel.ON_DEMAND, at)
        if on_demand is None:
            left_out.append(_missing_rate(key, [PricingModel.ON_DEMAND], at, "on-prem"))
        elif capacity == 0:
            left_out.append(NotAnalysed(key, "on-prem", "its on-prem ledger hours have no price", unpriced_fix(key)))
        elif currencies != {catalog.currency}:
            left_out.append(
                NotAnalysed(
                    key,
                    "on-prem",
                    f"its ledger hours are priced in {', '.join(sorted(currencies))}, the catalogue in "
                    f"{catalog.currency}",
                    "run gpu-finops rollup to re-price the ledger with the catalogue in force",
                )
            )
        else:
            compared.append(
                OnPremComparison(
                    model=key,
                    gpu_names=tuple(sorted(names)),
                    capacity_cost=sum((p.cost for p in parts), Decimal(0)),
                    capacity_gpu_seconds=capacity,
                    allocated_gpu_seconds=sum(p.allocated for p in parts),
                    used_gpu_seconds=sum(p.used for p in parts),
                    on_demand_rate=on_demand,
                    unpriced_gpu_seconds=sum(p.unpriced for p in parts),
                )
            )
    return compared, left_out
