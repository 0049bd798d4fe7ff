"""The cost model: pure functions on exact decimals (no database, no float money).

Definitions (docs/cost-model.md has them in full, with a worked example):

- capacity cost of a GPU in an hour = rate (currency per GPU-hour) × in-service seconds of that hour / 3600,
  rounded half-even to :data:`QUANTUM` (one millionth of the currency unit);
- that amount is split among the hour's holders (each job holding the GPU, and ``__unallocated__`` for
  the rest) in proportion to their seconds by the largest-remainder method, so the parts add up to the
  capacity cost exactly: conservation holds by construction, per GPU-hour and so in every sum;
- of a job's allocated cost, used cost = allocated × mean utilisation (rounded to the quantum) and idle
  (waste) cost = allocated − used; an unmetered holding (no samples) has neither;
- energy cost = joules ÷ 3.6e6 (kWh) × tariff × PUE, rounded to the quantum; it is reported beside the
  capacity cost, not added to it (cloud prices include power; the on-prem rate already has its share);
- reports round each column's group totals to cents by the largest-remainder method against the rounded
  grand total (:func:`round_preserving_total`), so displayed cents add up too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_FLOOR, ROUND_HALF_EVEN, Decimal

QUANTUM = Decimal("0.000001")
CENT = Decimal("0.01")
SECONDS_PER_HOUR = 3600
JOULES_PER_KWH = Decimal(3_600_000)


def quantize(amount: Decimal, quantum: Decimal = QUANTUM) -> Decimal:
    """``amount`` rounded half-even to ``quantum``."""
    return amount.quantize(quantum, rounding=ROUND_HALF_EVEN)


def split_exact(total: Decimal, weights: Sequence[int | float], quantum: Decimal = QUANTUM) -> list[Decimal]:
    """Split ``total`` in proportion to ``weights`` so the parts are multiples of ``quantum`` and add up exactly.

    Largest-remainder (Hamilton) method: each part gets the floor of its exact share, and the quanta left
    over go one each to the largest remainders (ties to the earlier weight). ``total`` must be a multiple
    of ``quantum``; weights must be >= 0 with a positive sum (else ValueError).
    """
    if total != total.quantize(quantum):
        raise ValueError(f"total {total} is not a multiple of {quantum}")
    weight_sum = sum(weights)
    if weight_sum <= 0 or any(weight < 0 for weight in weights):
        raise ValueError(f"weights must be >= 0 with a positive sum, got {list(weights)}")
    units = int(total / quantum)
    exact = [Decimal(units) * Decimal(weight) / Decimal(weight_sum) for weight in weights]
    floors = [int(share.to_integral_value(rounding=ROUND_FLOOR)) for share in exact]
    leftover = units - sum(floors)
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - floors[i]), i))
    for i in order[:leftover]:
        floors[i] += 1
    return [quantum * part for part in floors]


def round_preserving_total(amounts: Sequence[Decimal], quantum: Decimal = CENT) -> list[Decimal]:
    """Round each amount to ``quantum`` so the rounded values add up to the rounded exact total.

    Largest-remainder method on signed amounts: floors first, then one quantum each to the largest
    remainders until the sum matches ``quantize(sum(amounts))``.
    """
    target_units = int(quantize(sum(amounts, Decimal(0)), quantum) / quantum)
    exact = [amount / quantum for amount in amounts]
    floors = [int(share.to_integral_value(rounding=ROUND_FLOOR)) for share in exact]
    leftover = target_units - sum(floors)
    order = sorted(range(len(amounts)), key=lambda i: (-(exact[i] - floors[i]), i))
    for i in order[:leftover]:
        floors[i] += 1
    return [quantum * units for units in floors]


def capacity_cost(rate_per_hour: Decimal, seconds: int) -> Decimal:
    """Cost of holding one GPU for ``seconds`` at ``rate_per_hour`` (currency per GPU-hour), to the quantum."""
    return quantize(rate_per_hour * seconds / SECONDS_PER_HOUR)


@dataclass(frozen=True, slots=True)
class Holding:
    """Who held a GPU for how long within one hour. ``job`` None is the unallocated remainder.

    ``utilization`` is the mean utilisation ratio (0..1) of the samples in those seconds; None = unmetered.
    """

    job: int | None
    seconds: int
    utilization: float | None


@dataclass(frozen=True, slots=True)
class HoldingCost:
    """Money for one :class:`Holding`: ``allocated = used + idle`` for metered jobs; exact decimals."""

    holding: Holding
    allocated: Decimal
    used: Decimal
    idle: Decimal

    @property
    def used_gpu_seconds(self) -> float:
        """GPU-seconds of useful work: seconds × mean utilisation (0 when unmetered or unallocated)."""
        h = self.holding
        return 0.0 if h.job is None or h.utilization is None else h.seconds * h.utilization


def gpu_hour_costs(rate_per_hour: Decimal, holdings: Sequence[Holding]) -> list[HoldingCost]:
    """Split one GPU-hour's capacity cost among its holdings (seconds add up to its in-service seconds).

    Returns one :class:`HoldingCost` per holding, in order, whose ``allocated`` add up to
    ``capacity_cost(rate, Σ seconds)`` exactly. Unallocated and unmetered holdings have used = idle = 0.
    """
    positive = [h for h in holdings if h.seconds > 0]
    if not positive:
        return []
    total = capacity_cost(rate_per_hour, sum(h.seconds for h in positive))
    shares = split_exact(total, [h.seconds for h in positive])
    costs = []
    for holding, allocated in zip(positive, shares, strict=True):
        if holding.job is None or holding.utilization is None:
            costs.append(HoldingCost(holding, allocated, Decimal(0), Decimal(0)))
            continue
        used = quantize(allocated * Decimal(str(min(max(holding.utilization, 0.0), 1.0))))
        costs.append(HoldingCost(holding, allocated, used, allocated - used))
    return costs


def energy_cost(joules: float, tariff_per_kwh: Decimal, pue: Decimal) -> Decimal:
    """Cost of ``joules`` of GPU energy at the facility: kWh × tariff × PUE, to the quantum."""
    kwh = Decimal(repr(joules)) / JOULES_PER_KWH
    return quantize(kwh * tariff_per_kwh * pue)
