"""The efficiency part of a team's monthly showback statement: how much of its GPUs' SMs its jobs kept busy, and the
jobs that were busy but inefficient, from the efficiency report (:func:`finops.savings.efficiency.efficiency_report`
of the team and period; its bands, means and costs, docs/efficiency.md).

Two sections (:class:`~finops.savings.showback_statement.Section`):

- ``efficiency``, one row: the team's SM activity (mean over its jobs' profiled GPU-seconds, as a percent), its band
  (NVIDIA's DCGM guidance: effective ≥ 0.8, ineffective < 0.5, :mod:`finops.savings.efficiency_policy`), the share
  of its GPU-hours that were profiled, its SM-active cost and its inactive cost (the allocated cost of the GPU-hours
  that measured SM activity less their SM-active cost). A team none of whose GPU-hours measured SM activity has no
  row: the note says *not measured* and how to measure it (:data:`NOT_MEASURED_FIX`), never 0 % nor a band.
- ``inefficient_jobs``: the team's busy-but-inefficient jobs, costliest first (the report's order): job, user,
  probable bottleneck, utilisation, SM activity, allocated and inactive cost, with a total; the e-mail and the text
  show the first :data:`SHOWN_JOBS`, the CSV up to :data:`finops.savings.showback.MAX_ROWS`.

Money is in cents, each column by :func:`finops.ledger.costmodel.round_preserving_total` over the rows that have an
amount, so the rows add up to the total; an unpriced amount stays None (``unpriced``), never 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from finops.ledger.costmodel import CENT, float_decimal, quantize, round_preserving_total
from finops.savings.efficiency import EfficiencyReport, JobEfficiency, TeamEfficiency
from finops.savings.efficiency_policy import NOT_MEASURED, EfficiencyPolicy
from finops.savings.showback_statement import Cell, Column, Section, sum_cells

SHOWN_JOBS = 5
"""Busy-but-inefficient jobs the e-mail and the text show; the rest is one line (the CSV has them all)."""
NOT_MEASURED_FIX = (
    "turn on the DCGM profiling fields (DCGM_FI_PROF_SM_ACTIVE and the others) or NVML GPM on the team's nodes: "
    "docs/collector.md#hardware-activity"
)
"""What makes SM activity measured."""


def _percent(ratio: float | None) -> Decimal | None:
    """A ratio as a percent to one decimal (None stays None)."""
    return None if ratio is None else quantize(float_decimal(ratio) * 100, Decimal("0.1"))


def _cents(amounts: Sequence[Decimal | None]) -> list[Decimal | None]:
    """``amounts`` in cents adding up to their rounded total; None kept."""
    known = [i for i, amount in enumerate(amounts) if amount is not None]
    rounded = round_preserving_total([amounts[i] or Decimal(0) for i in known])
    out: list[Decimal | None] = [None] * len(amounts)
    for i, amount in zip(known, rounded, strict=True):
        out[i] = amount
    return out


def efficiency_section(team: TeamEfficiency | None, policy: EfficiencyPolicy) -> Section:
    """The ``efficiency`` section of ``team``'s row of the efficiency report (None: no job of the team held a GPU
    in the period) under ``policy`` (module docstring)."""
    columns = (
        Column("sm_active_percent", "SM activity", "percent"),
        Column("efficiency_band", "Band", "text"),
        Column("profiled_percent", "Profiled GPU-hours", "percent"),
        Column("sm_active_cost", "SM-active cost", "money"),
        Column("inactive_cost", "Inactive cost", "money"),
    )
    title = "GPU efficiency (SM activity)"
    if team is None:
        return Section("efficiency", title, columns, note="No job of the team held a GPU in this period.")
    sm_active = team.mean("sm_active")
    if sm_active is None:
        note = (
            f"SM activity: {NOT_MEASURED}. None of the team's GPU-hours carried it; to measure it, {NOT_MEASURED_FIX}."
        )
        return Section("efficiency", title, columns, note=note)
    note = (
        "SM activity is the share of time the SMs of the team's GPUs had work (DCGM_FI_PROF_SM_ACTIVE, averaged over "
        "the SMs), the mean over the profiled GPU-hours; NVIDIA's DCGM guidance reads "
        f"{policy.effective_ratio:g} or more as necessary for effective use and below {policy.ineffective_ratio:g} as "
        "likely ineffective. Inactive cost is what the profiled GPU-hours cost less their SM-active cost (cost × SM "
        "activity): what the empty SMs cost (docs/efficiency.md)."
    )
    share = team.profiled_share
    if share is not None and share < 1:
        note += f" {1 - share:.1%} of the GPU-hours had no profiling data and are left out; {NOT_MEASURED_FIX}."
    cells: tuple[Cell, ...] = (
        _percent(sm_active),
        team.band,
        _percent(share),
        None if team.sm_active_cost is None else quantize(team.sm_active_cost, CENT),
        None if team.inactive_cost is None else quantize(team.inactive_cost, CENT),
    )
    return Section("efficiency", title, columns, (cells,), note=note)


def inefficient_section(
    jobs: Sequence[JobEfficiency], policy: EfficiencyPolicy, *, measured: bool, max_rows: int
) -> Section:
    """The ``inefficient_jobs`` section of the team's busy-but-inefficient ``jobs`` (costliest first) under
    ``policy``; ``measured``: whether any of the team's GPU-hours measured SM activity (without, the note says the
    jobs could not be judged); past ``max_rows``, one row "N more jobs" sums the rest."""
    columns = (
        Column("job", "Job", "text"),
        Column("user", "User", "text"),
        Column("bottleneck", "Probable bottleneck", "text"),
        Column("utilization_percent", "Utilisation", "percent"),
        Column("sm_active_percent", "SM activity", "percent"),
        Column("allocated_cost", "Cost", "money"),
        Column("inactive_cost", "Inactive", "money"),
    )
    title = "Busy but inefficient jobs"
    rule = (
        f"utilisation {policy.busy_utilization_ratio:.0%} or more (kernels running) while SM activity stayed below "
        f"{policy.ineffective_ratio:.0%}"
    )
    if not measured:
        return Section("inefficient_jobs", title, columns, note=f"Not judged: SM activity {NOT_MEASURED}.")
    if not jobs:
        return Section("inefficient_jobs", title, columns, note=f"No job of the team had {rule}.")
    allocated = _cents([job.allocated_cost for job in jobs])
    inactive = _cents([job.inactive_cost for job in jobs])
    rows: list[tuple[Cell, ...]] = [
        (job.job_id, job.user, "" if job.bottleneck is None else job.bottleneck.title, _percent(job.utilization),
         _percent(job.sm_active), a, i)
        for job, a, i in zip(jobs, allocated, inactive, strict=True)
    ]  # fmt: skip
    if len(rows) > max_rows:
        rest = rows[max_rows - 1 :]
        more: tuple[Cell, ...] = (f"{len(rest)} more jobs", "", "", "", "", *(sum_cells([r[k] for r in rest])
                                  for k in (5, 6)))  # fmt: skip
        rows = [*rows[: max_rows - 1], more]
    total: tuple[Cell, ...] = ("Total", "", "", "", "", *(sum_cells([r[k] for r in rows]) for k in (5, 6)))
    note = (
        f"Jobs with {rule}: their GPUs looked busy, yet most of the SMs sat empty. Costliest first, each with its "
        "probable bottleneck; the evidence and the usual fix: gpu-finops report --by efficiency."
    )
    return Section("inefficient_jobs", title, columns, tuple(rows), total, note=note, shown=SHOWN_JOBS, noun="jobs")


def efficiency_sections(report: EfficiencyReport, team: str, *, max_rows: int) -> tuple[Section, Section]:
    """The statement's ``efficiency`` and ``inefficient_jobs`` sections of ``team`` from ``report`` (the efficiency
    report of the statement's period, of that team)."""
    found = next((row for row in report.teams if row.team == team), None)
    measured = found is not None and found.mean("sm_active") is not None
    jobs = [job for job in report.inefficient if job.team == team]
    return (
        efficiency_section(found, report.policy),
        inefficient_section(jobs, report.policy, measured=measured, max_rows=max_rows),
    )
