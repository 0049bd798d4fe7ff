"""The commitment optimum (finops/savings/commitment_cost.py) against a brute-force search over every whole quantity
from 0 to the peak demand on random hourly series (hypothesis), with exact rational costs; the cost curve, the
utilisation and the monthly saving by their definitions; a series worked by hand; bad input refused."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from finops.ledger.costmodel import round_exact
from finops.savings.commitment_cost import (
    HOURS_PER_MONTH,
    HourlyDemand,
    cost_curve,
    optimal_quantity,
    optimum,
    outcome,
)

HOUR = 3600

hourly = st.integers(0, 12).map(lambda gpus: gpus * HOUR) | st.integers(0, 12 * HOUR)
"""GPU-seconds held in an hour: whole GPUs, or any share of them (MIG slices, jobs starting mid-hour)."""
series = st.lists(hourly, min_size=1, max_size=120)
rates = st.decimals(min_value=0, max_value=20, places=5)


def brute_cost(seconds: list[int], quantity: int, committed: Decimal, overflow: Decimal) -> Fraction:
    """Q × H × c + o × Σ_h max(0, d_h − Q), hour by hour, exactly."""
    over = sum(max(0, s - quantity * HOUR) for s in seconds)
    return quantity * len(seconds) * Fraction(committed) + Fraction(overflow) * Fraction(over, HOUR)


def brute_optimum(seconds: list[int], committed: Decimal, overflow: Decimal) -> tuple[int, Fraction]:
    """The smallest quantity of least cost among 0 .. ⌈max demand⌉ GPUs, and that cost."""
    peak = -(-max(seconds) // HOUR)
    costs = [(brute_cost(seconds, q, committed, overflow), q) for q in range(peak + 1)]
    cost, quantity = min(costs)
    return quantity, cost


@settings(max_examples=400)
@given(seconds=series, committed=rates, overflow=rates)
def test_the_optimum_is_the_brute_force_minimum(seconds: list[int], committed: Decimal, overflow: Decimal) -> None:
    demand = HourlyDemand(seconds)
    quantity, cost = brute_optimum(seconds, committed, overflow)
    assert optimal_quantity(demand, committed, overflow) == quantity
    best = optimum(demand, committed, overflow)
    assert (best.quantity, best.cost) == (quantity, round_exact(cost))
    assert best.baseline_cost == round_exact(brute_cost(seconds, 0, committed, overflow))


@settings(max_examples=150)
@given(seconds=series, committed=rates, overflow=rates)
def test_the_curve_is_the_cost_of_every_quantity(seconds: list[int], committed: Decimal, overflow: Decimal) -> None:
    curve = cost_curve(HourlyDemand(seconds), committed, overflow)
    assert [q for q, _ in curve] == list(range(len(curve))) and len(curve) == -(-max(seconds) // HOUR) + 1
    assert [c for _, c in curve] == [round_exact(brute_cost(seconds, q, committed, overflow)) for q, _ in curve]
    lowest = min(c for _, c in curve)
    assert optimum(HourlyDemand(seconds), committed, overflow).cost == lowest


@settings(max_examples=150)
@given(seconds=series, quantity=st.integers(0, 15), committed=rates, overflow=rates)
def test_an_outcome_by_its_definitions(
    seconds: list[int], quantity: int, committed: Decimal, overflow: Decimal
) -> None:
    plan = outcome(HourlyDemand(seconds), quantity, committed, overflow)
    covered = sum(min(s, quantity * HOUR) for s in seconds)
    assert (plan.covered_gpu_seconds, plan.overflow_gpu_seconds) == (covered, sum(seconds) - covered)
    if quantity == 0:
        assert plan.utilisation is None
    else:
        assert plan.utilisation == pytest.approx(covered / (quantity * len(seconds) * HOUR))
        assert 0 <= plan.utilisation <= 1
    assert plan.saving == plan.baseline_cost - plan.cost
    assert plan.saving_per_month == round_exact(Fraction(plan.saving) * HOURS_PER_MONTH / len(seconds))


def test_a_series_worked_by_hand() -> None:
    """0, 1, 2 and 3 GPUs over four hours, reserved 1 and on-demand 2 per GPU-hour: cost(Q) = 4Q + 2 × overflow
    = 12, 10, 10, 12 for Q = 0..3. Two quantities tie; the smaller is the answer, and it is the quantile
    ⌊4 × 1/2⌋ = 2 hours above: the 2nd smallest demand, 1 GPU, used 3 of its 4 hours."""
    demand = HourlyDemand([0, HOUR, 2 * HOUR, 3 * HOUR])
    assert [c for _, c in cost_curve(demand, Decimal(1), Decimal(2))] == [12, 10, 10, 12]
    best = optimum(demand, Decimal(1), Decimal(2))
    assert (best.quantity, best.cost, best.saving, best.utilisation) == (1, 10, 2, 0.75)
    assert best.saving_per_month == Decimal(2) * HOURS_PER_MONTH / 4
    assert optimal_quantity(demand, Decimal(2), Decimal(2)) == 0, "a commitment no cheaper than overflow: none"
    assert optimal_quantity(demand, Decimal(0), Decimal(2)) == 3, "a free commitment: the peak"
    assert optimal_quantity(demand, Decimal(1), Decimal(0)) == 0, "free overflow: none"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: HourlyDemand([]), "at least one hour"),
        (lambda: HourlyDemand([HOUR, -1]), "cannot be negative"),
        (lambda: outcome(HourlyDemand([HOUR]), -1, Decimal(1), Decimal(2)), "cannot be negative"),
        (lambda: optimum(HourlyDemand([HOUR]), Decimal(-1), Decimal(2)), "rates must be"),
        (lambda: cost_curve(HourlyDemand([HOUR]), Decimal(1), Decimal("NaN")), "rates must be"),
    ],
)
def test_bad_input_is_refused(make, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message):
        make()
