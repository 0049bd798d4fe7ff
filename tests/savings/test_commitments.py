"""Commitments from the ledger (finops/savings/commitments.py), on both databases: the hourly demand it reads (held
seconds only, every rented pricing model, one series per catalogue model whatever names its GPUs were reported
under, from the model's first ledger hour, the window's edges), the plans it makes of it, owned GPUs against the
on-demand rate, and every model it cannot analyse listed with the reason and the fix. Ledger rows are written
directly, as a rollup writes them; the last test reads a ledger the rollup built."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

import pytest
from sqlalchemy.orm import Session, sessionmaker

from finops.analysis.report import cost_report
from finops.db.ledger_tables import LedgerEntry
from finops.db.models import UNALLOCATED_TEAM, Gpu, Job, Node
from finops.jobs.teams import team_by_name
from finops.ledger.costmodel import quantize, round_exact
from finops.ledger.rollup import rollup
from finops.ledger.rollup_result import unpriced_fix
from finops.pricing.catalog import PricingModel, load_catalog
from finops.pricing.rules import set_pricing_rule
from finops.savings.commitment_cost import HourlyDemand, optimum, outcome
from finops.savings.commitments import CommitmentReport, commitment_report
from finops.timeutil import to_epoch
from tests.support import scenario

END = datetime(2026, 11, 20, tzinfo=UTC)
DAYS = 2
HOURS = DAYS * 24
CATALOG = load_catalog()
H100, H200, MI250X = "H100-SXM-80GB", "H200", "MI250X"
UNKNOWN = "ACME Z9 64GB"
H200_FROM = 10
"""The hour of the window from which the H200 is in the ledger."""
OWNED_RATE = Decimal("1.5")
"""The on-prem capacity cost per GPU-hour written on the owned H100s' rows."""


def _held(node: int, gpu: int, hour: int) -> int:
    """Seconds a job held GPU ``gpu`` of rented H100 node ``node`` in window hour ``hour`` (negative: before the
    window): node 0's GPUs by turns, node 1's half-hour MIG-like shares every other hour."""
    if node == 0:
        return 3600 if gpu < hour % 5 else (1200 if gpu == 3 and hour % 7 == 0 else 0)
    return 1800 if hour % 2 == 0 else 0


def _rows(
    session: Session, gpu: Gpu, hour: datetime, held: int, pricing_model: str, job: Job, rate: Decimal | None
) -> None:
    """The ledger rows of one GPU-hour: ``held`` seconds of ``job`` and the rest unallocated, costed at ``rate`` per
    GPU-hour (None: unpriced), ``used_gpu_seconds`` half the held seconds."""
    unallocated = team_by_name(session, UNALLOCATED_TEAM)
    for job_pk, team_id, seconds in ((job.id, job.team_id, held), (None, unallocated.id, 3600 - held)):
        if seconds:
            cost = None if rate is None else quantize(rate * seconds / 3600)
            session.add(
                LedgerEntry(
                    hour=hour, gpu_id=gpu.id, job_pk=job_pk, team_id=team_id, seconds=seconds,
                    used_gpu_seconds=seconds / 2 if job_pk else 0.0, sample_count=60, energy_joules=0.0,
                    allocated_cost=cost, used_cost=None if cost is None else Decimal(0),
                    idle_cost=None if cost is None else Decimal(0), energy_cost=Decimal(0), currency="USD",
                    pricing_model=pricing_model,
                )
            )  # fmt: skip


def _gpus(session: Session, hostname: str, model: str, count: int) -> list[Gpu]:
    node = Node(hostname=hostname)
    session.add(node)
    session.flush()
    gpus = [
        Gpu(node_id=node.id, gpu_index=i, model=model, in_service_from=END - timedelta(days=30)) for i in range(count)
    ]
    session.add_all(gpus)
    session.flush()
    return gpus


@pytest.fixture
def fleet(sessions: sessionmaker[Session]) -> sessionmaker[Session]:
    """The window [END − 2 days, END) and the hour before it:

    - rented H100s: node ``r0`` (4 GPUs named as NVML names them, billed on demand) and node ``r1`` (2 GPUs named
      ``h100`` as a GRES type, billed reserved), held as :func:`_held` says;
    - an H200 (billed spot) held whole from window hour :data:`H200_FROM` on;
    - owned H100s: node ``o0``, 2 GPUs billed on-prem at :data:`OWNED_RATE`, GPU 0 held every hour, GPU 1 never;
    - an MI250X (no reserved rate in the catalogue) and a GPU of :data:`UNKNOWN` (no catalogue model, unpriced),
      each held every hour.
    """
    with sessions.begin() as session:
        team = team_by_name(session, "alpha")
        job = Job(
            scheduler="slurm", cluster="c", job_id="1", job_id_raw="1", user="u", account="a", partition="p",
            name="train", state="RUNNING", gpus=1, node_list="r0", team_id=team.id,
        )  # fmt: skip
        session.add(job)
        session.flush()
        rented = [_gpus(session, "r0", scenario.MODEL, 4), _gpus(session, "r1", "h100", 2)]
        h200 = _gpus(session, "r2", "NVIDIA H200", 1)[0]
        owned = _gpus(session, "o0", scenario.MODEL, 2)
        mi250x = _gpus(session, "m0", "AMD Instinct MI250X", 1)[0]
        unknown = _gpus(session, "u0", UNKNOWN, 1)[0]
        start = END - timedelta(hours=HOURS)
        for hour in range(-1, HOURS):
            at = start + timedelta(hours=hour)
            for node, (gpus, billed) in enumerate(zip(rented, ("on-demand", "reserved"), strict=True)):
                for index, gpu in enumerate(gpus):
                    _rows(session, gpu, at, _held(node, index, hour), billed, job, Decimal("3"))
            if hour >= H200_FROM:
                _rows(session, h200, at, 3600, "spot", job, Decimal("2"))
            for index, gpu in enumerate(owned):
                _rows(session, gpu, at, 3600 if index == 0 else 0, "on-prem", job, OWNED_RATE)
            _rows(session, mi250x, at, 3600, "on-demand", job, Decimal("1"))
            _rows(session, unknown, at, 3600, "on-demand", job, None)
    return sessions


def _report(sessions: sessionmaker[Session], **kwargs: object) -> CommitmentReport:
    with sessions() as session:
        return commitment_report(session, CATALOG, END, DAYS, **kwargs)  # type: ignore[arg-type]


def _rate(model: str, pricing_model: PricingModel) -> Decimal:
    return CATALOG.rate(model, pricing_model, END)


def _sorted_demand(demand: HourlyDemand) -> list[int]:
    return [demand.smallest(rank) for rank in range(1, demand.hours + 1)]


def test_demand_is_the_held_seconds_of_each_rented_model_from_its_first_hour(fleet) -> None:  # type: ignore[no-untyped-def]
    report = _report(fleet, quantity=2)
    plans = {c.model: c for c in report.commitments}
    assert set(plans) == {H100, H200}, "owned, MI250X and unknown GPUs make no commitment"
    assert (report.start, report.end) == (END - timedelta(days=DAYS), END)

    h100 = plans[H100]
    expected = [
        sum(_held(node, gpu, hour) for node, count in ((0, 4), (1, 2)) for gpu in range(count)) for hour in range(HOURS)
    ]
    assert h100.gpu_names == ("NVIDIA H100 80GB HBM3", "h100"), "both names, one series"
    assert (h100.start, h100.demand.hours) == (report.start, HOURS)
    assert _sorted_demand(h100.demand) == sorted(expected), "held seconds only, on-demand and reserved rows alike"
    rates = _rate(H100, PricingModel.RESERVED), _rate(H100, PricingModel.ON_DEMAND)
    assert (h100.reserved_rate, h100.on_demand_rate) == rates
    assert h100.best == optimum(HourlyDemand(expected), *rates)
    assert h100.what_if == outcome(HourlyDemand(expected), 2, *rates)
    spot = _rate(H100, PricingModel.SPOT)
    assert h100.spot_rate == spot and h100.spot_overflow == optimum(HourlyDemand(expected), rates[0], spot, rates[1])
    assert spot < rates[0] and h100.spot_overflow.quantity == 0, "overflow cheaper than a commitment: commit none"
    assert h100.spot_overflow.baseline_cost == h100.best.baseline_cost, "saving against all on demand"
    assert h100.best.baseline_cost == round_exact(Fraction(rates[1]) * Fraction(sum(expected), 3600))

    h200 = plans[H200]
    assert (h200.start, h200.demand.hours) == (report.start + timedelta(hours=H200_FROM), HOURS - H200_FROM)
    assert (h200.best.quantity, h200.best.utilisation) == (1, 1.0), "one GPU held every hour of its series"
    assert h200.best.saving_per_month == quantize(
        (_rate(H200, PricingModel.ON_DEMAND) - _rate(H200, PricingModel.RESERVED)) * 730
    )
    assert [c.model for c in report.commitments] == sorted(plans, key=lambda m: -plans[m].best.saving_per_month)


def test_owned_gpus_cost_per_held_and_busy_gpu_hour_against_on_demand(fleet) -> None:  # type: ignore[no-untyped-def]
    (owned,) = _report(fleet).on_prem
    on_demand = _rate(H100, PricingModel.ON_DEMAND)
    assert (owned.model, owned.gpu_names) == (H100, ("NVIDIA H100 80GB HBM3",))
    assert owned.capacity_cost == 2 * HOURS * OWNED_RATE, "both GPUs' every hour in the window, held or not"
    assert (owned.capacity_gpu_seconds, owned.allocated_gpu_seconds) == (2 * HOURS * 3600, HOURS * 3600)
    assert owned.cost_per_allocated_gpu_hour == 2 * OWNED_RATE, "two owned GPU-hours paid per held one"
    assert owned.cost_per_used_gpu_hour == 4 * OWNED_RATE, "held at 50 %"
    assert owned.on_demand_cost == HOURS * on_demand
    assert owned.allocated_ratio == pytest.approx(float(2 * OWNED_RATE / on_demand))
    assert owned.used_ratio == pytest.approx(float(4 * OWNED_RATE / on_demand))


def test_models_that_cannot_be_analysed_are_listed_with_the_fix(fleet) -> None:  # type: ignore[no-untyped-def]
    left_out = {(n.model, n.section): n for n in _report(fleet).not_analysed}
    assert set(left_out) == {(MI250X, "commitment"), (UNKNOWN, "commitment")}
    assert "no reserved rate" in left_out[MI250X, "commitment"].reason
    assert "reserved row for 'MI250X'" in left_out[MI250X, "commitment"].fix
    assert "prices import" in left_out[MI250X, "commitment"].fix
    assert left_out[UNKNOWN, "commitment"].fix == unpriced_fix(UNKNOWN)


@pytest.mark.parametrize("name", ["h100", "NVIDIA H100 80GB HBM3", H100])
def test_a_model_filter_takes_any_name_of_the_model(fleet, name: str) -> None:  # type: ignore[no-untyped-def]
    report = _report(fleet, model=name)
    assert [c.model for c in report.commitments] == [H100]
    assert [o.model for o in report.on_prem] == [H100]
    assert report.not_analysed == []
    assert [(n.model, n.reason) for n in _report(fleet, model=UNKNOWN).not_analysed] == [
        (n.model, n.reason) for n in _report(fleet).not_analysed if n.model == UNKNOWN
    ]


def test_the_window_ends_at_the_hour_and_leaves_out_older_hours(fleet) -> None:  # type: ignore[no-untyped-def]
    inside = _report(fleet)
    with fleet() as session:
        later = commitment_report(session, CATALOG, END + timedelta(minutes=59), DAYS)
        longer = commitment_report(session, CATALOG, END, DAYS + 1)
    assert later.commitments == inside.commitments, "a part hour is not in the window"
    h100 = {c.model: c for c in longer.commitments}[H100]
    assert h100.demand.hours == HOURS + 1, "a longer window starts at the model's first ledger hour, the hour before"
    extra = sum(_held(node, gpu, -1) for node, count in ((0, 4), (1, 2)) for gpu in range(count))
    assert (
        h100.demand.total_gpu_seconds == {c.model: c for c in inside.commitments}[H100].demand.total_gpu_seconds + extra
    )


@pytest.mark.parametrize(("days", "quantity"), [(0, None), (367, None), (30, -1), (30, 1_000_001)])
def test_bounds_are_refused(sessions: sessionmaker[Session], days: int, quantity: int | None) -> None:
    with sessions() as session, pytest.raises(ValueError, match=r"^(days|quantity) must be"):
        commitment_report(session, CATALOG, END, days, quantity=quantity)


def test_on_a_ledger_the_rollup_built(loaded) -> None:  # type: ignore[no-untyped-def]
    """The scenario slice (tests/support/scenario.py) rolled up: 5,400 GPU-seconds held in each of its two hours;
    billed on-prem by a pricing rule, its capacity cost (the report's total) over its 3 held GPU-hours."""
    sessions, t0, _, pricing = loaded
    end = t0 + timedelta(hours=2)
    (plan,) = _at(sessions, end).commitments
    assert (plan.model, plan.start, plan.demand.hours) == (H100, t0, 2)
    assert _sorted_demand(plan.demand) == [5400, 5400]
    assert _at(sessions, end).on_prem == []
    with sessions.begin() as session:
        set_pricing_rule(session, "node", "", scenario.NODE, PricingModel.ON_PREM, actor="system:test")
        rollup(session, pricing, to_epoch(end))
    after = _at(sessions, end)
    assert after.commitments == []
    (owned,) = after.on_prem
    with sessions() as session:
        capacity = sum((row.allocated_cost for row in cost_report(session, t0, end)), Decimal(0))
    assert capacity > 0 and owned.capacity_cost == capacity
    assert (owned.capacity_gpu_seconds, owned.allocated_gpu_seconds) == (4 * 3600, 3 * 3600)
    assert owned.cost_per_allocated_gpu_hour == round_exact(Fraction(capacity) / 3)


def _at(sessions: sessionmaker[Session], end: datetime) -> CommitmentReport:
    with sessions() as session:
        return commitment_report(session, CATALOG, end, 1)
