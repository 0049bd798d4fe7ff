"""The waste report (:mod:`finops.savings.waste_costs`) as the API, the CLI and the dashboard give it: JSON-ready rows
with costs in cents that add up to their total, CSV, and the aligned text table of ``gpu-finops report waste``."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from finops.analysis.report_format import dicts_csv
from finops.analysis.waste import NO_READING
from finops.ledger.costmodel import round_preserving_total
from finops.savings.waste_costs import IDLE_KIND, UNMETERED_KIND, JobWaste, ReasonCost, WasteReport


def reason_dicts(rows: Sequence[ReasonCost]) -> list[dict[str, object]]:
    """JSON-ready rows: ``{team, month (YYYY-MM), reason, title, kind, gpu_hours, unpriced_gpu_hours, cost,
    currency}``, ``kind`` :attr:`ReasonCost.kind` (``idle``: idle GPU-hours and idle cost; ``unmetered``: the
    ``no_reading`` GPU-hours and their allocated cost), cost a decimal string in cents (null when all the row's
    GPU-hours are unpriced), the idle rows' cents adding up to their rounded total and the unmetered rows' to theirs;
    hours rounded to 6 decimals."""
    cents = _cents_by_kind(rows)
    return [
        {
            "team": row.team,
            "month": f"{row.month:%Y-%m}",
            "reason": row.reason,
            "title": row.title,
            "kind": row.kind,
            "gpu_hours": round(row.gpu_seconds / 3600, 6),
            "unpriced_gpu_hours": round(row.unpriced_gpu_seconds / 3600, 6),
            "cost": None if row.unpriced_gpu_seconds >= row.gpu_seconds > 0 and not row.cost else str(amount),
            "currency": row.currency,
        }
        for row, amount in zip(rows, cents, strict=True)
    ]


def _cents_by_kind(rows: Sequence[ReasonCost]) -> list[Decimal]:
    """The rows' costs in cents by :func:`round_preserving_total` within each kind, in row order."""
    cents: list[Decimal] = [Decimal(0)] * len(rows)
    for kind in (IDLE_KIND, UNMETERED_KIND):
        members = [i for i, row in enumerate(rows) if row.kind == kind]
        for i, amount in zip(members, round_preserving_total([rows[i].cost for i in members]), strict=True):
            cents[i] = amount
    return cents


def job_dicts(jobs: Sequence[JobWaste]) -> list[dict[str, object]]:
    """JSON-ready :class:`JobWaste` rows: job id, team, user, name, GPUs, mean utilisation (ratio, 4 decimals),
    idle GPU-hours, idle cost (decimal string, cents), currency, reason, title, evidence and ``kind``: ``idle``, or
    ``unmetered`` for a job whose verdict is ``no_reading`` (its ``idle_gpu_hours`` and ``idle_cost`` are then
    its GPU-hours without a reading and their allocated cost, not known to be idle)."""
    return [
        {
            "job_id": job.job_id,
            "team": job.team,
            "user": job.user,
            "name": job.name,
            "gpus": job.gpus,
            "mean_utilization": None if job.mean_utilization is None else round(job.mean_utilization, 4),
            "idle_gpu_hours": round(job.idle_gpu_seconds / 3600, 6),
            "idle_cost": f"{job.idle_cost:.2f}",
            "currency": job.currency,
            "reason": job.verdict.reason,
            "title": job.verdict.title,
            "evidence": job.verdict.evidence,
            "kind": UNMETERED_KIND if job.verdict.reason == NO_READING else IDLE_KIND,
        }
        for job in jobs
    ]


def reason_csv(rows: Sequence[ReasonCost]) -> str:
    """The rows of :func:`reason_dicts` as CSV text with a header line (empty without rows)."""
    return dicts_csv(reason_dicts(rows))


def reason_table(report: WasteReport, jobs_shown: int = 10) -> str:
    """The report as fixed-width text: per team, month and reason the idle GPU-hours, unpriced GPU-hours and idle
    cost (in cents that add up to the TOTAL line), then the ``jobs_shown`` costliest low-utilisation jobs with their
    reason and evidence; the GPU-hours without a reading apart, after them: per team and month with their allocated
    cost (not idle waste: whether the GPUs worked is unknown), the jobs they belong to and how to get readings."""
    if not report.rows:
        return "No job-held GPU-hours in this period."
    currency = report.rows[0].currency
    dicts = reason_dicts(report.rows)
    idle = [d for d in dicts if d["kind"] == IDLE_KIND]
    unmetered = [d for d in dicts if d["kind"] == UNMETERED_KIND]
    out = [f"Idle cost by reason, in {currency}"]
    if idle:
        out += aligned(_reason_lines(idle, ["team", "month", "reason", "idle GPU-h", "unpriced GPU-h", "idle cost"]),
                       left=3)  # fmt: skip
    else:
        out.append("No idle GPU-hours with a reading in this period.")
    jobs = [job for job in report.jobs if job.verdict.reason != NO_READING]
    if jobs:
        out += ["", f"Low-utilisation jobs, costliest first ({min(len(jobs), jobs_shown)} of {len(jobs)}):"]
        out += _job_lines(jobs[:jobs_shown], ["idle GPU-h", "idle cost"])
    if unmetered:
        out += [
            "",
            f"No reading (not idle waste, not in the idle cost above): GPU-hours jobs held without any reading, at "
            f"their allocated cost in {currency}; whether those GPUs worked is unknown.",
        ]
        out += aligned(_reason_lines(unmetered, ["team", "month", "", "GPU-h", "unpriced GPU-h", "allocated"]), left=3)
        dark = [job for job in report.jobs if job.verdict.reason == NO_READING]
        if dark:
            out += ["", f"Jobs without readings, costliest first ({min(len(dark), jobs_shown)} of {len(dark)}):"]
            out += _job_lines(dark[:jobs_shown], ["GPU-h", "allocated"])
        out += ["", NO_READING_FIX]
    return "\n".join(out)


NO_READING_FIX = (
    "To get readings: run the collector on the nodes these jobs ran on (gpu-finops collector, docs/collector.md), "
    "or pull from a Prometheus that scrapes DCGM (gpu-finops import prometheus); the collector-silent alert and the "
    "dashboard's Data quality page name the nodes that stopped reporting."
)
"""What the report by reason says to do about GPU-hours without a reading."""


def _reason_lines(dicts: Sequence[dict[str, object]], headers: list[str]) -> list[list[str]]:
    """A table of reason rows (:func:`reason_dicts`) with ``headers``, and a TOTAL line."""
    lines = [
        [str(d["team"]), str(d["month"]), str(d["title"]) if headers[2] else "", f"{d['gpu_hours']:,.2f}",
         f"{d['unpriced_gpu_hours']:,.2f}", "unpriced" if d["cost"] is None else f"{Decimal(str(d['cost'])):,.2f}"]
        for d in dicts
    ]  # fmt: skip
    total = sum((Decimal(str(d["cost"] or 0)) for d in dicts), Decimal(0))
    hours = sum(float(str(d["gpu_hours"])) for d in dicts)
    unpriced = sum(float(str(d["unpriced_gpu_hours"])) for d in dicts)
    return [headers, *lines, ["TOTAL", "", "", f"{hours:,.2f}", f"{unpriced:,.2f}", f"{total:,.2f}"]]


def _job_lines(jobs: Sequence[JobWaste], money_headers: list[str]) -> list[str]:
    """The jobs' table: job, team, user, mean use, GPU-hours and cost (``money_headers``), reason and evidence."""
    rows = [["job", "team", "user", "mean use", *money_headers, "probable reason"]]
    rows += [
        [job.job_id, job.team, job.user, "—" if job.mean_utilization is None else f"{job.mean_utilization:.0%}",
         f"{job.idle_gpu_seconds / 3600:,.2f}", f"{job.idle_cost:,.2f}", f"{job.verdict.title}: {job.verdict.evidence}"]
        for job in jobs
    ]  # fmt: skip
    return aligned(rows, left=3, last_free=True)


def aligned(rows: Sequence[Sequence[str]], left: int, last_free: bool = False) -> list[str]:
    """``rows`` of cells as lines: the first ``left`` columns left-aligned, the others right-aligned, two spaces
    apart; with ``last_free`` the last column is left as it is (free text)."""
    fixed = len(rows[0]) - (1 if last_free else 0)
    widths = [max(len(row[i]) for row in rows) for i in range(fixed)]
    lines = []
    for row in rows:
        cells = [
            c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(row[:fixed], widths, strict=True))
        ]
        lines.append("  ".join([*cells, *row[fixed:]]).rstrip())
    return lines
