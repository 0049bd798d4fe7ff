"""The cost model: pure functions on exact decimals (no database, no float money).

Definitions (docs/cost-model.md has them in full, with a worked example):

- capacity cost of a GPU in an hour = rate (currency per GPU-hour) × in-service seconds of that hour / 3600,
  rounded half-even to :data:`QUANTUM` (one millionth of the currency unit);
- that amount is split among the hour's holders (each job holding the GPU or a share of it, and
  ``__unallocated__`` for the rest) in proportion to seconds × share — where holdings overlap (time-slicing,
  MPS), stretch by stretch, by the jobs' own utilisation when measured (:func:`gpu_hour_costs`) — by the
  largest-remainder method, so the parts add up to the capacity cost exactly: conservation holds by
  construction, per GPU-hour and so in every sum;
- of a job's allocated cost, used cost = allocated × mean utilisation (rounded to the quantum) and idle
  (waste) cost = allocated − used; an unmetered holding (no samples) has neither;
- energy cost = joules ÷ 3.6e6 (kWh) × tariff × PUE, rounded to the quantum; it is reported beside the
  capacity cost, not added to it (cloud prices include power; the on-prem rate already has its share);
- every product and quotient is exact (rational arithmetic) and rounded once, half-even; a float reading
  (utilisation, joules) enters as the decimal of its shortest round-trip text (``repr``), the value
  PostgreSQL's ``CAST(x AS text)`` gives too, so SQL can apply the same formulas to the same figures;
- reports round each column's group totals to cents by the largest-remainder method against the rounded
  grand total (:func:`round_preserving_total`), so displayed cents add up too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_FLOOR, ROUND_HALF_EVEN, Decimal
from fractions import Fraction
from itertools import pairwise

MONEY_DECIMALS = 6
QUANTUM = Decimal(1).scaleb(-MONEY_DECIMALS)
_QUANTA_PER_UNIT = 10**MONEY_DECIMALS
CENT = Decimal("0.01")
SECONDS_PER_HOUR = 3600
JOULES_PER_KWH = Decimal(3_600_000)


def quantize(amount: Decimal, quantum: Decimal = QUANTUM) -> Decimal:
    """``amount`` rounded half-even to ``quantum``."""
    return amount.quantize(quantum, rounding=ROUND_HALF_EVEN)


def _half_even(numerator: int, denominator: int) -> int:
    """``numerator ÷ denominator`` (``denominator`` > 0) rounded half-even to an integer, exactly."""
    units, rest = divmod(numerator, denominator)
    if 2 * rest > denominator or (2 * rest == denominator and units % 2 == 1):
        units += 1
    return units


def _micro_units(numerator: int, denominator: int) -> Decimal:
    """``numerator ÷ denominator`` currency units rounded half-even to :data:`QUANTUM`, exactly."""
    return Decimal(_half_even(numerator * _QUANTA_PER_UNIT, denominator)).scaleb(-MONEY_DECIMALS)


def round_exact(value: Fraction, quantum: Decimal = QUANTUM) -> Decimal:
    """The exact rational ``value`` rounded half-even to a multiple of ``quantum``: one rounding, no
    intermediate decimal context (``Decimal`` arithmetic would round products and quotients to 28 digits first)."""
    quantum_numerator, quantum_denominator = quantum.as_integer_ratio()
    units = _half_even(value.numerator * quantum_denominator, value.denominator * quantum_numerator)
    return quantize(Decimal(units) * quantum, quantum)


def float_decimal(value: float) -> Decimal:
    """A float reading as the exact decimal of its shortest round-trip text (``repr``): 0.1 is 0.1, not the
    binary fraction 0.1000000000000000055…. PostgreSQL's ``CAST(CAST(x AS text) AS numeric)`` gives the same
    decimal (``extra_float_digits`` ≥ 1, the default: shortest-precise output)."""
    return Decimal(repr(value))


def split_exact(total: Decimal, weights: Sequence[int | float | Fraction], quantum: Decimal = QUANTUM) -> list[Decimal]:
    """Split ``total`` in proportion to ``weights`` so the parts are multiples of ``quantum`` and add up exactly.

    Largest-remainder (Hamilton) method: each part gets the floor of its exact share, and the quanta left
    over go one each to the largest remainders (ties to the earlier weight). Shares are computed in exact
    rational arithmetic. ``total`` must be a multiple of ``quantum``; weights must be >= 0 with a positive
    sum (else ValueError).
    """
    if total != total.quantize(quantum):
        raise ValueError(f"total {total} is not a multiple of {quantum}")
    if all(isinstance(weight, int) for weight in weights):
        integers = [int(weight) for weight in weights]
    else:
        integers = _integer_weights([Fraction(weight) for weight in weights])
    if sum(integers) <= 0 or any(weight < 0 for weight in integers):
        raise ValueError(f"weights must be >= 0 with a positive sum, got {list(weights)}")
    weight_sum = sum(integers)
    units = int(total / quantum)
    floors = [units * weight // weight_sum for weight in integers]
    remainders = [units * weight % weight_sum for weight in integers]
    leftover = units - sum(floors)
    order = sorted(range(len(integers)), key=lambda i: (-remainders[i], i))
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
    """Cost of holding one GPU for ``seconds`` at ``rate_per_hour`` (currency per GPU-hour): rate × seconds ÷ 3600,
    exact, rounded half-even to the quantum."""
    rate_numerator, rate_denominator = rate_per_hour.as_integer_ratio()
    return _micro_units(rate_numerator * seconds, rate_denominator * SECONDS_PER_HOUR)


def used_cost(allocated: Decimal, utilization: float) -> Decimal:
    """The used part of ``allocated``: allocated × mean utilisation ratio (clamped to 0..1, as
    :func:`float_decimal`), exact, rounded half-even to the quantum. Idle cost is ``allocated − used``."""
    allocated_numerator, allocated_denominator = allocated.as_integer_ratio()
    ratio_numerator, ratio_denominator = float_decimal(min(max(utilization, 0.0), 1.0)).as_integer_ratio()
    return _micro_units(allocated_numerator * ratio_numerator, allocated_denominator * ratio_denominator)


@dataclass(frozen=True, slots=True)
class Holding:
    """A job holding a GPU, or a share of it, for ``seconds`` of one hour.

    ``share`` is the fraction of the physical GPU held: 1 for a whole GPU, a MIG profile's slices over the
    parent's (``1g.10gb`` of an H100: 1/7). ``utilization`` is the mean utilisation ratio (0..1) of the samples
    in those seconds; None = unmetered. ``offset``: where in the GPU-hour's in-service span the holding starts,
    in seconds from its start (it ends ``seconds`` later); None when not known. ``usage``: on a GPU time-sliced
    between jobs (or shared through MPS), the job's own part of the GPU's utilisation (its processes' SM
    utilisation, ratio 0..1), when known. :func:`gpu_hour_costs` says how both are used.
    """

    job: int
    seconds: int
    utilization: float | None
    share: Fraction = Fraction(1)
    offset: int | None = None
    usage: float | None = None


@dataclass(frozen=True, slots=True)
class HoldingCost:
    """Money and GPU time of one holding (``job`` None: the unallocated remainder of the GPU-hour).

    ``gpu_seconds``: whole-GPU-equivalent seconds (seconds × share, split so a GPU-hour's parts add up to its
    in-service seconds exactly). ``allocated = used + idle`` for metered holdings; exact decimals.
    """

    job: int | None
    gpu_seconds: int
    utilization: float | None
    allocated: Decimal
    used: Decimal
    idle: Decimal

    @property
    def used_gpu_seconds(self) -> float:
        """GPU-seconds of useful work: GPU-seconds × mean utilisation (0 when unmetered or unallocated)."""
        return 0.0 if self.job is None or self.utilization is None else self.gpu_seconds * self.utilization


def _integer_weights(weights: Sequence[Fraction]) -> list[int]:
    """Rational weights scaled by the least common multiple of their denominators: same proportions, integers."""
    scale = math.lcm(*(weight.denominator for weight in weights))
    return [int(weight * scale) for weight in weights]


def _share_weights(positive: Sequence[Holding], capacity_seconds: int) -> list[Fraction]:
    """Seconds × share per holding, then the unallocated remainder when positive (rules in
    :func:`gpu_hour_costs`)."""
    weights = [h.seconds * h.share for h in positive]
    remainder = capacity_seconds - sum(weights, Fraction(0))
    return [*weights, remainder] if remainder > 0 else weights


def _overlapping(positive: Sequence[Holding]) -> bool:
    """Whether every holding has an offset and some two of them overlap in time (where they do not, the sweep
    and seconds × share give the same weights, and the latter is cheaper)."""
    if len(positive) < 2 or any(h.offset is None for h in positive):
        return False
    ends = 0
    for start, stop in sorted((h.offset or 0, (h.offset or 0) + h.seconds) for h in positive):
        if start < ends:
            return True
        ends = max(ends, stop)
    return False


def _ratio(value: float) -> Fraction:
    """A ratio reading clamped to 0..1, exactly as the decimal of its shortest text (:func:`float_decimal`)."""
    return Fraction(float_decimal(min(max(value, 0.0), 1.0)))


def _timeline_weights(positive: Sequence[Holding], capacity_seconds: int) -> list[Fraction]:
    """GPU-seconds per holding, then the unallocated remainder when positive, from where each holding lies in the
    hour: a sweep over the stretches between holdings' starts and ends (rules in :func:`gpu_hour_costs`)."""
    spans = [(h.offset or 0, (h.offset or 0) + h.seconds) for h in positive]
    bounds = sorted({0, capacity_seconds, *(t for span in spans for t in span if 0 < t < capacity_seconds)})
    weights = [Fraction(0)] * len(positive)
    unallocated = Fraction(0)
    for a, b in pairwise(bounds):
        active = [i for i, (start, stop) in enumerate(spans) if start <= a and b <= stop]
        shares = sum((positive[i].share for i in active), Fraction(0))
        if shares <= 1:
            for i in active:
                weights[i] += (b - a) * positive[i].share
            unallocated += (b - a) * (1 - shares)
            continue
        parts = [positive[i].share for i in active]
        usage = [positive[i].usage for i in active]
        if all(u is not None for u in usage):
            busy = [share * _ratio(u or 0.0) for share, u in zip(parts, usage, strict=True)]
            parts = busy if sum(busy) > 0 else parts
        total = sum(parts, Fraction(0))
        for i, part in zip(active, parts, strict=True):
            weights[i] += (b - a) * part / total
    return [*weights, unallocated] if unallocated > 0 else weights


def gpu_hour_costs(rate_per_hour: Decimal, capacity_seconds: int, held: Sequence[Holding]) -> list[HoldingCost]:
    """Split one GPU-hour's capacity cost among its holdings and the unallocated remainder.

    The capacity is ``capacity_cost(rate, capacity_seconds)`` (the GPU's in-service seconds of the hour). It is
    split among the holdings and the unallocated remainder by weights, money (at :data:`QUANTUM`) and GPU-seconds
    (at 1 s) alike, by :func:`split_exact`, so each adds up exactly and the GPU is never billed twice.

    Weights when every holding has an ``offset`` (the ledger's case): the hour is swept stretch by stretch
    (between any holding's start or end). In a stretch whose holdings' shares add up to at most 1 (one job,
    jobs one after another, MIG slices), each holding weighs length × share and the rest of the GPU is
    unallocated. An overbooked stretch (time-slicing or MPS: shares above 1) is split whole among its holdings,
    in proportion to share × ``usage`` when every one of them has a usage and they add up to more than 0 (the
    job that kept the GPU busy pays for it), else in proportion to share (equally between whole-GPU holdings).
    Time nobody held stays unallocated, however the holdings overlap.

    Without offsets: each holding weighs seconds × share and the remainder ``capacity_seconds − Σ weights``;
    weights above the capacity split it in proportion. A holding's ``utilization`` says how busy the GPU was
    while it held it, whichever the weights.

    Returns one :class:`HoldingCost` per holding with positive seconds, in order, then the unallocated one if
    its weight is positive; ``[]`` when ``capacity_seconds`` is 0.
    """
    if capacity_seconds <= 0:
        return []
    positive = [h for h in held if h.seconds > 0]
    swept = _overlapping(positive)
    exact = _timeline_weights(positive, capacity_seconds) if swept else _share_weights(positive, capacity_seconds)
    weights = _integer_weights(exact)
    if len(weights) == 1:  # one holder of the whole GPU-hour, or nobody: nothing to split
        money = [capacity_cost(rate_per_hour, capacity_seconds)]
        seconds = [Decimal(capacity_seconds)]
    else:
        money = split_exact(capacity_cost(rate_per_hour, capacity_seconds), weights)
        seconds = split_exact(Decimal(capacity_seconds), weights, Decimal(1))
    costs = []
    for i, allocated in enumerate(money):
        holding = positive[i] if i < len(positive) else None
        utilization = holding.utilization if holding is not None else None
        if holding is None or utilization is None:
            used = Decimal(0)
            idle = Decimal(0)
        else:
            used = used_cost(allocated, utilization)
            idle = allocated - used
        costs.append(
            HoldingCost(
                job=holding.job if holding is not None else None,
                gpu_seconds=int(seconds[i]),
                utilization=utilization,
                allocated=allocated,
                used=used,
                idle=idle,
            )
        )
    return costs


def energy_cost(joules: float, tariff_per_kwh: Decimal, pue: Decimal) -> Decimal:
    """Cost of ``joules`` (as :func:`float_decimal`) of GPU energy at the facility: joules ÷ 3.6e6 (kWh) × tariff
    (currency per kWh) × PUE, exact, rounded half-even to the quantum."""
    joules_numerator, joules_denominator = float_decimal(joules).as_integer_ratio()
    tariff_numerator, tariff_denominator = tariff_per_kwh.as_integer_ratio()
    pue_numerator, pue_denominator = pue.as_integer_ratio()
    return _micro_units(
        joules_numerator * tariff_numerator * pue_numerator,
        joules_denominator * tariff_denominator * pue_denominator * int(JOULES_PER_KWH),
    )
