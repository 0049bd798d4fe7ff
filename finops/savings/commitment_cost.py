"""What a GPU commitment costs against an hourly demand series, the quantity that costs least, and the cost curve.

A commitment (a reservation, a savings plan) of ``Q`` whole GPUs is paid at the committed rate ``c`` every hour of
the period, used or not; demand above ``Q`` is paid at the overflow rate ``o`` (on-demand, or spot). With ``d_h``
the GPUs held in hour ``h`` of ``H`` (fractional with MIG shares)::

    cost(Q) = Q × H × c + o × Σ_h max(0, d_h − Q)

Why the optimum is a quantile (the newsvendor's critical fractile: Arrow, Harris and Marschak, "Optimal Inventory
Policy", Econometrica 19(3), 1951): ``cost`` is convex and piecewise linear in a real ``Q``, with right derivative
``H × c − o × #{h : d_h > Q}``. It is negative while more than ``H × c / o`` hours exceed ``Q`` and not negative
after, so the smallest real minimiser is the smallest ``Q ≥ 0`` with ``#{h : d_h > Q} ≤ k``, ``k = ⌊H × c / o⌋``:
the ``(H − k)``-th smallest demand (0 when ``k ≥ H``, i.e. when committing costs at least as much as overflow).
In words, a committed GPU pays off when demand exceeds it in more than ``c / o`` of the hours: the break-even
utilisation of a reservation. A convex function's minimum over the integers lies at the floor or the ceiling of a
real minimiser (it is non-increasing up to a minimiser and non-decreasing after it), and the cost decreases
strictly up to the smallest real minimiser, so comparing those two integers (the smaller on a tie) gives the
smallest integer minimiser. Sorting the series is the dominant step: O(H log H); each cost is then O(log H) by
bisection over the sorted demand and its suffix sums.

Demand is given in whole-GPU-equivalent GPU-seconds per hour (the ledger's ``seconds``: 3,600 is one GPU held for
the hour), so every cost is an exact rational, compared exactly, and rounded once to
:data:`finops.ledger.costmodel.QUANTUM` (:func:`finops.ledger.costmodel.round_exact`). Savings per month scale the
period to a month of :data:`HOURS_PER_MONTH` hours.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from itertools import accumulate

from finops.ledger.costmodel import SECONDS_PER_HOUR, round_exact

HOURS_PER_MONTH = 730
"""Hours in the month that savings are scaled to: 8,760 / 12, the month of cloud price lists (AWS, Azure and Google
Cloud quote monthly prices as 730 hours)."""


class HourlyDemand:
    """GPUs held in each of ``hours`` consecutive hours, as whole-GPU-equivalent GPU-seconds per hour (integers ≥ 0;
    3,600 is one GPU for the hour), kept sorted with suffix sums. ValueError for no hours or a negative value."""

    __slots__ = ("_above", "_sorted")

    def __init__(self, gpu_seconds: Iterable[int]) -> None:
        values = sorted(int(value) for value in gpu_seconds)
        if not values:
            raise ValueError("a demand series needs at least one hour")
        if values[0] < 0:
            raise ValueError(f"GPU-seconds held in an hour cannot be negative, got {values[0]}")
        self._sorted = values
        self._above = [*accumulate(reversed(values), initial=0)][::-1]
        """``_above[i]``: the sum of ``_sorted[i:]``."""

    def __eq__(self, other: object) -> bool:
        """Equal when the hours' GPU-seconds are the same values (in any order: every cost depends on them only)."""
        return isinstance(other, HourlyDemand) and self._sorted == other._sorted

    __hash__ = None  # type: ignore[assignment]  # compared by content, so not hashable (as a list)

    def __repr__(self) -> str:
        return f"HourlyDemand(hours={self.hours}, total_gpu_seconds={self.total_gpu_seconds}, peak={self._sorted[-1]})"

    @property
    def hours(self) -> int:
        """H: hours in the series."""
        return len(self._sorted)

    @property
    def total_gpu_seconds(self) -> int:
        """GPU-seconds held over the series."""
        return self._above[0]

    @property
    def peak_gpus(self) -> int:
        """The most GPUs held in an hour, rounded up to whole GPUs."""
        return math.ceil(self._sorted[-1] / SECONDS_PER_HOUR)

    def smallest(self, rank: int) -> int:
        """The ``rank``-th smallest hour's GPU-seconds (1: the least; :attr:`hours`: the most)."""
        return self._sorted[rank - 1]

    def overflow_gpu_seconds(self, quantity: int) -> int:
        """GPU-seconds held beyond ``quantity`` GPUs: Σ_h max(0, s_h − 3600 × quantity)."""
        cap = quantity * SECONDS_PER_HOUR
        first_above = bisect_right(self._sorted, cap)
        return self._above[first_above] - cap * (self.hours - first_above)


@dataclass(frozen=True, slots=True)
class CommitmentOutcome:
    """A commitment of ``quantity`` GPUs over a demand series of ``hours``: ``cost`` of the commitment and the
    overflow, ``baseline_cost`` (every held GPU-hour at the rate paid without a plan: by default the overflow rate,
    i.e. quantity 0), and the GPU-seconds the commitment covered and those that overflowed. Money in the rates'
    currency, rounded to 6 decimals."""

    quantity: int
    hours: int
    cost: Decimal
    baseline_cost: Decimal
    covered_gpu_seconds: int
    overflow_gpu_seconds: int

    @property
    def saving(self) -> Decimal:
        """``baseline_cost − cost`` over the series (negative when the plan costs more than the baseline)."""
        return self.baseline_cost - self.cost

    @property
    def saving_per_month(self) -> Decimal:
        """:attr:`saving` scaled to a month of :data:`HOURS_PER_MONTH` hours, rounded to 6 decimals."""
        return round_exact(Fraction(self.saving) * HOURS_PER_MONTH / self.hours)

    @property
    def utilisation(self) -> float | None:
        """Share of the committed GPU-hours that demand used: Σ_h min(d_h, Q) ÷ (Q × H); None for quantity 0."""
        if self.quantity == 0:
            return None
        return self.covered_gpu_seconds / (self.quantity * self.hours * SECONDS_PER_HOUR)


def _exact_cost(demand: HourlyDemand, quantity: int, committed_rate: Fraction, overflow_rate: Fraction) -> Fraction:
    """cost(Q) of the module docstring, exactly."""
    overflow = Fraction(demand.overflow_gpu_seconds(quantity), SECONDS_PER_HOUR)
    return quantity * demand.hours * committed_rate + overflow_rate * overflow


def _rates(committed_rate: Decimal, overflow_rate: Decimal) -> tuple[Fraction, Fraction]:
    if not all(rate.is_finite() and rate >= 0 for rate in (committed_rate, overflow_rate)):
        raise ValueError(f"rates must be finite and ≥ 0, got {committed_rate} and {overflow_rate}")
    return Fraction(committed_rate), Fraction(overflow_rate)


def outcome(
    demand: HourlyDemand,
    quantity: int,
    committed_rate: Decimal,
    overflow_rate: Decimal,
    baseline_rate: Decimal | None = None,
) -> CommitmentOutcome:
    """The cost of committing ``quantity`` GPUs at ``committed_rate`` with the overflow at ``overflow_rate``
    (currency per GPU-hour) over ``demand``, against every held GPU-hour at ``baseline_rate`` (default:
    ``overflow_rate``; give the on-demand rate when the overflow goes to spot). ValueError for a negative quantity
    or rate."""
    if quantity < 0:
        raise ValueError(f"a committed quantity cannot be negative, got {quantity}")
    committed, overflow = _rates(committed_rate, overflow_rate)
    _, baseline = _rates(committed_rate, overflow_rate if baseline_rate is None else baseline_rate)
    overflow_seconds = demand.overflow_gpu_seconds(quantity)
    return CommitmentOutcome(
        quantity=quantity,
        hours=demand.hours,
        cost=round_exact(_exact_cost(demand, quantity, committed, overflow)),
        baseline_cost=round_exact(baseline * Fraction(demand.total_gpu_seconds, SECONDS_PER_HOUR)),
        covered_gpu_seconds=demand.total_gpu_seconds - overflow_seconds,
        overflow_gpu_seconds=overflow_seconds,
    )


def optimal_quantity(demand: HourlyDemand, committed_rate: Decimal, overflow_rate: Decimal) -> int:
    """The smallest whole number of GPUs whose commitment costs least (module docstring): the
    ``(H − ⌊H × c / o⌋)``-th smallest demand, its floor or ceiling in whole GPUs, whichever costs less. 0 when the
    overflow rate is 0 or not above the committed one. ValueError for a negative rate."""
    committed, overflow = _rates(committed_rate, overflow_rate)
    if overflow == 0:
        return 0
    allowed_above = math.floor(demand.hours * committed / overflow)
    if allowed_above >= demand.hours:
        return 0
    quantile = demand.smallest(demand.hours - allowed_above)
    low, high = quantile // SECONDS_PER_HOUR, -(-quantile // SECONDS_PER_HOUR)
    if _exact_cost(demand, high, committed, overflow) < _exact_cost(demand, low, committed, overflow):
        return high
    return low


def optimum(
    demand: HourlyDemand, committed_rate: Decimal, overflow_rate: Decimal, baseline_rate: Decimal | None = None
) -> CommitmentOutcome:
    """:func:`outcome` of :func:`optimal_quantity` (which ``baseline_rate`` does not change)."""
    quantity = optimal_quantity(demand, committed_rate, overflow_rate)
    return outcome(demand, quantity, committed_rate, overflow_rate, baseline_rate)


def cost_curve(demand: HourlyDemand, committed_rate: Decimal, overflow_rate: Decimal) -> list[tuple[int, Decimal]]:
    """``(quantity, cost)`` for every whole quantity from 0 to the peak demand (beyond it the cost only grows by
    ``H × c`` per GPU), cost rounded to 6 decimals: the curve whose lowest point is :func:`optimum`."""
    committed, overflow = _rates(committed_rate, overflow_rate)
    return [
        (quantity, round_exact(_exact_cost(demand, quantity, committed, overflow)))
        for quantity in range(demand.peak_gpus + 1)
    ]
