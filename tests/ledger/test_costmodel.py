"""The cost model's arithmetic: exact splits, conservation to the micro-unit, rounding that adds up."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from finops.ledger.costmodel import (
    CENT,
    QUANTUM,
    Holding,
    capacity_cost,
    energy_cost,
    float_decimal,
    gpu_hour_costs,
    round_exact,
    round_preserving_total,
    split_exact,
    used_cost,
)

rates = st.decimals(min_value=Decimal("0.01"), max_value=Decimal("100"), places=4)


def test_split_exact_hand_example() -> None:
    # 1.000000 over weights 1:1:1 -> 333334, 333333, 333333 micro-units: the leftover unit goes to the first tie.
    assert split_exact(Decimal("1"), [1, 1, 1]) == [Decimal("0.333334"), Decimal("0.333333"), Decimal("0.333333")]


def test_split_exact_is_exact_for_rational_weights() -> None:
    # 1/7 and 6/7 of 7.000000: exactly 1 and 6, no rounding drift.
    assert split_exact(Decimal("7"), [Fraction(1, 7), Fraction(6, 7)]) == [Decimal("1"), Decimal("6")]


def test_split_exact_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="multiple"):
        split_exact(Decimal("0.0000001"), [1])
    with pytest.raises(ValueError, match="positive sum"):
        split_exact(Decimal("1"), [0, 0])


@given(rate=rates, seconds=st.lists(st.integers(min_value=0, max_value=3600), min_size=1, max_size=6))
def test_gpu_hour_costs_conserve_capacity(rate: Decimal, seconds: list[int]) -> None:
    """Whatever the holdings (overlapping ones too: time-slicing), the GPU-hour is billed exactly once."""
    holdings = [Holding(i + 1, s, 0.5) for i, s in enumerate(seconds)]
    costs = gpu_hour_costs(rate, 3600, holdings)
    assert sum(c.allocated for c in costs) == capacity_cost(rate, 3600)
    assert sum(c.gpu_seconds for c in costs) == 3600
    for cost in costs:
        assert cost.used + cost.idle == (cost.allocated if cost.job is not None else 0)
        assert cost.allocated == cost.allocated.quantize(QUANTUM)


@given(
    rate=rates,
    slices=st.lists(st.tuples(st.integers(1, 7), st.integers(1, 3600)), min_size=1, max_size=7),
)
def test_mig_shares_conserve_capacity(rate: Decimal, slices: list[tuple[int, int]]) -> None:
    """MIG holdings of k/7 of a GPU: parts and the unallocated remainder add up to the GPU-hour exactly."""
    holdings = [Holding(i + 1, seconds, 1.0, Fraction(k, 7)) for i, (k, seconds) in enumerate(slices)]
    costs = gpu_hour_costs(rate, 3600, holdings)
    assert sum(c.allocated for c in costs) == capacity_cost(rate, 3600)
    assert sum(c.gpu_seconds for c in costs) == 3600


def test_mig_slice_costs_its_profile_share() -> None:
    # An H100 at 7.000000 per GPU-hour; a 1g.10gb slice (1/7) held all hour costs 1.000000, the rest is unallocated.
    held, unallocated = gpu_hour_costs(Decimal("7"), 3600, [Holding(1, 3600, 0.25, Fraction(1, 7))])
    assert (held.job, held.allocated, held.used, held.idle) == (1, Decimal("1"), Decimal("0.25"), Decimal("0.75"))
    assert held.gpu_seconds in (514, 515)
    assert (unallocated.job, unallocated.allocated, unallocated.gpu_seconds) == (None, 6, 3600 - held.gpu_seconds)


def test_time_sliced_gpu_is_split_not_billed_twice() -> None:
    # Two pods share one GPU all hour (time-slicing): each pays half, no unallocated remainder.
    first, second = gpu_hour_costs(Decimal("4"), 3600, [Holding(1, 3600, 0.5), Holding(2, 3600, 0.5)])
    assert (first.allocated, second.allocated, first.gpu_seconds, second.gpu_seconds) == (2, 2, 1800, 1800)


def test_time_sliced_gpu_is_split_by_each_jobs_own_utilisation_when_known() -> None:
    """Two jobs share a GPU all hour, one at 99 % SM and one with none (the figures of the nvidia-smi pmon
    capture of an H100 in the shared data, gpu_burn beside two memhog processes, typed in here): the busy job
    pays the whole hour. With the usage of one job unknown, the hour is split equally."""
    busy, idle = gpu_hour_costs(
        Decimal("4"), 3600, [Holding(1, 3600, 0.99, offset=0, usage=0.99), Holding(2, 3600, 0.99, offset=0, usage=0)]
    )
    assert (busy.allocated, idle.allocated, busy.gpu_seconds, idle.gpu_seconds) == (4, 0, 3600, 0)
    assert busy.used == used_cost(Decimal(4), 0.99)
    first, second = gpu_hour_costs(
        Decimal("4"), 3600, [Holding(1, 3600, 0.5, offset=0, usage=0.3), Holding(2, 3600, 0.5, offset=0)]
    )
    assert (first.allocated, second.allocated) == (2, 2)


def test_overlapping_holdings_leave_the_time_nobody_held_unallocated() -> None:
    """Jobs 1 and 2 share the GPU over the first half hour (usage 0.3 and 0.1), job 3 holds it alone for the
    next quarter: the first half hour is split 3 : 1, the quarter is job 3's, the last quarter unallocated.
    Without offsets (seconds only) the overlap could not be told from jobs one after another."""
    first, second, third, unallocated = gpu_hour_costs(
        Decimal("8"),
        3600,
        [
            Holding(1, 1800, 0.4, offset=0, usage=0.3),
            Holding(2, 1800, 0.4, offset=0, usage=0.1),
            Holding(3, 900, 1.0, offset=1800),
        ],
    )
    assert [c.allocated for c in (first, second, third, unallocated)] == [3, 1, 2, 2]
    assert [c.gpu_seconds for c in (first, second, third, unallocated)] == [1350, 450, 900, 900]
    equal = gpu_hour_costs(Decimal("8"), 3600, [Holding(1, 1800, 0.4, offset=0), Holding(2, 1800, 0.4, offset=0)])
    assert [c.allocated for c in equal] == [2, 2, 4]


def test_a_mig_slice_and_a_whole_gpu_job_after_it_sweep_like_the_seconds() -> None:
    """No overbooked stretch: the sweep gives what seconds × share gives."""
    held = [Holding(1, 1800, 0.5, Fraction(1, 7), offset=0), Holding(2, 1200, 0.5, offset=2400)]
    timed = gpu_hour_costs(Decimal("7"), 3600, held)
    untimed = gpu_hour_costs(Decimal("7"), 3600, [Holding(h.job, h.seconds, h.utilization, h.share) for h in held])
    assert timed == untimed


@settings(max_examples=200)
@given(
    rate=rates,
    held=st.lists(
        st.tuples(
            st.integers(0, 3599),
            st.integers(1, 3600),
            st.sampled_from([Fraction(1), Fraction(1, 7), Fraction(3, 7)]),
            st.none() | st.floats(min_value=0, max_value=1),
        ),
        min_size=1,
        max_size=6,
    ),
)
def test_swept_split_conserves_capacity_and_leaves_unheld_time_unallocated(
    rate: Decimal, held: list[tuple[int, int, Fraction, float | None]]
) -> None:
    holdings = [
        Holding(i + 1, min(seconds, 3600 - offset), 0.5, share, offset=offset, usage=usage)
        for i, (offset, seconds, share, usage) in enumerate(held)
    ]
    costs = gpu_hour_costs(rate, 3600, holdings)
    assert sum(c.allocated for c in costs) == capacity_cost(rate, 3600)
    assert sum(c.gpu_seconds for c in costs) == 3600
    covered = set().union(*(range(h.offset or 0, (h.offset or 0) + h.seconds) for h in holdings))
    unallocated = sum(c.gpu_seconds for c in costs if c.job is None)
    if all(h.share == 1 for h in holdings):
        assert unallocated == 3600 - len(covered)
    else:
        assert unallocated >= 3600 - len(covered)


@given(rate=rates, utilization=st.floats(min_value=0, max_value=1))
def test_used_and_idle_split_allocated(rate: Decimal, utilization: float) -> None:
    (cost,) = gpu_hour_costs(rate, 3600, [Holding(1, 3600, utilization)])
    assert cost.allocated == rate.quantize(QUANTUM)
    assert cost.used + cost.idle == cost.allocated
    assert abs(cost.used - rate * Decimal(str(utilization))) <= QUANTUM


def test_unmetered_holding_is_neither_used_nor_idle() -> None:
    (cost,) = gpu_hour_costs(Decimal("4"), 1800, [Holding(1, 1800, None)])
    assert (cost.allocated, cost.used, cost.idle) == (Decimal("2.000000"), 0, 0)


@given(st.lists(st.decimals(min_value=Decimal("-1000"), max_value=Decimal("1000"), places=6), min_size=1))
def test_round_preserving_total_adds_up(amounts: list[Decimal]) -> None:
    rounded = round_preserving_total(amounts)
    assert sum(rounded) == sum(amounts).quantize(CENT)
    assert all(abs(r - a) < CENT for r, a in zip(rounded, amounts, strict=True))


def test_energy_cost_hand_example() -> None:
    # 700 W for one hour = 2.52 MJ = 0.7 kWh; at 0.08/kWh and PUE 1.5: 0.7 * 0.08 * 1.5 = 0.084.
    assert energy_cost(2_520_000.0, Decimal("0.08"), Decimal("1.5")) == Decimal("0.084000")


def test_amounts_are_rounded_once_half_even_from_their_exact_value() -> None:
    # 645 J at 0.36 per kWh and PUE 1 cost exactly 0.0000645: a tie, to the even 0.000064. (Decimal arithmetic at
    # 28 digits would round 645 / 3.6e6 up first and end at 0.000065.) 575 J: 0.0000575 to 0.000058.
    assert energy_cost(645.0, Decimal("0.36"), Decimal("1")) == Decimal("0.000064")
    assert energy_cost(575.0, Decimal("0.36"), Decimal("1")) == Decimal("0.000058")
    # 1.000001 x 0.5 = 0.5000005 -> 0.500000; 1.000003 x 0.5 = 0.5000015 -> 0.500002.
    assert used_cost(Decimal("1.000001"), 0.5) == Decimal("0.500000")
    assert used_cost(Decimal("1.000003"), 0.5) == Decimal("0.500002")
    # Half a micro-unit of capacity: 0.000001 per hour for 30 minutes -> 0; 0.000003 -> 0.000002.
    assert capacity_cost(Decimal("0.000001"), 1800) == 0
    assert capacity_cost(Decimal("0.000003"), 1800) == Decimal("0.000002")
    assert round_exact(Fraction(-25, 10**7)) == Decimal("-0.000002")


def test_float_readings_enter_as_their_shortest_decimal() -> None:
    # The float 2.5e-06 is 0.0000025000000000000002045… in binary; as a reading it is 0.0000025, so a whole
    # currency unit of allocated cost at that utilisation is a tie, rounded to the even 0.000002.
    assert float_decimal(2.5e-06) == Decimal("0.0000025")
    assert used_cost(Decimal("1"), 2.5e-06) == Decimal("0.000002")
    assert float_decimal(0.1 + 0.2) == Decimal("0.30000000000000004")
    # Utilisation is clamped to 0..1.
    assert used_cost(Decimal("2"), 1.5) == Decimal("2")
