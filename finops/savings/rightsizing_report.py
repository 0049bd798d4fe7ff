"""Right-sizing findings as people and programs read them: summed per user or team, as JSON-ready rows with money in
cents that add up, as CSV, and as a text table (the findings: :func:`finops.savings.rightsizing.rightsizing`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

from finops.analysis.report_format import dicts_csv
from finops.ledger.costmodel import SECONDS_PER_HOUR, round_preserving_total
from finops.pricing.catalog import GIB
from finops.savings.rightsizing_policy import BOTH, UTILIZATION, JobFinding, RightsizingReport

GroupBy = Literal["job", "user", "team"]
GROUP_BYS: tuple[GroupBy, ...] = ("job", "user", "team")


@dataclass(frozen=True, slots=True)
class RightsizingTotal:
    """The findings of one user or team summed: ``jobs`` with a finding, their ``gpu_seconds``, ``saved_gpu_seconds``
    (dropped GPUs), savings (exact; priced findings only), ``memory_unknown_jobs`` and ``unpriced_jobs``."""

    key: str
    team: str | None
    jobs: int
    gpu_seconds: int
    saved_gpu_seconds: int
    count_saving: Decimal
    memory_saving: Decimal
    saving: Decimal
    memory_unknown_jobs: int
    unpriced_jobs: int
    currency: str


def rightsizing_totals(findings: Sequence[JobFinding], by: Literal["user", "team"]) -> list[RightsizingTotal]:
    """``findings`` summed per user (with its team when all its jobs have one) or per team, largest saving first."""
    groups: dict[str, list[JobFinding]] = defaultdict(list)
    for finding in findings:
        groups[finding.user if by == "user" else finding.team].append(finding)
    totals = []
    for key, group in groups.items():
        teams = {f.team for f in group}
        totals.append(
            RightsizingTotal(
                key=key,
                team=teams.pop() if len(teams) == 1 else None,
                jobs=len(group),
                gpu_seconds=sum(f.gpu_seconds for f in group),
                saved_gpu_seconds=sum(f.saved_gpu_seconds for f in group),
                count_saving=sum((f.count_saving or Decimal(0) for f in group), Decimal(0)),
                memory_saving=sum((f.memory_saving or Decimal(0) for f in group), Decimal(0)),
                saving=sum((f.saving or Decimal(0) for f in group), Decimal(0)),
                memory_unknown_jobs=sum(1 for f in group if f.memory_unknown),
                unpriced_jobs=sum(1 for f in group if f.allocated_cost is None),
                currency=min(f.currency for f in group),
            )
        )
    return sorted(totals, key=lambda t: (-t.saving, -t.saved_gpu_seconds, t.key))


def _ratio(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def measure_line(finding: JobFinding) -> str | None:
    """What judged a finding's GPUs when SM activity did, with both means, so a reader sees why a job that looks
    busy by utilisation is listed: ``judged by SM activity: 10.0 % (utilisation 100.0 %)``, ``… over 40.0 % of its
    metered GPU-seconds, utilisation over the rest``; None when utilisation alone judged it."""
    if finding.measure == UTILIZATION or finding.sm_active is None:
        return None
    utilization = "no reading" if finding.mean_utilization is None else f"{finding.mean_utilization:.1%}"
    text = f"judged by SM activity: {finding.sm_active:.1%} (utilisation {utilization})"
    if finding.measure == BOTH:
        text += f" over {finding.sm_active_share or 0.0:.1%} of its metered GPU-seconds, utilisation over the rest"
    return text


def _hours(seconds: float) -> float:
    return round(seconds / SECONDS_PER_HOUR, 6)


def _cents(values: Sequence[Decimal | None]) -> list[str | None]:
    """Each amount in cents as text, rounded so the shown ones add up to their rounded total
    (:func:`finops.ledger.costmodel.round_preserving_total`); None stays None."""
    known = [i for i, value in enumerate(values) if value is not None]
    rounded = round_preserving_total([values[i] or Decimal(0) for i in known])
    shown: list[str | None] = [None] * len(values)
    for i, cents in zip(known, rounded, strict=True):
        shown[i] = str(cents)
    return shown


_FINDING_MONEY = ("allocated_cost", "count_saving", "mig_saving", "smaller_model_saving", "memory_saving", "saving")


def finding_dicts(findings: Sequence[JobFinding]) -> list[dict[str, Any]]:
    """JSON-ready findings: the :class:`JobFinding` fields (times ISO 8601 UTC, GPU-seconds also as
    ``gpu_hours`` and ``saved_gpu_hours``, ``memory_peak_gib``, ratios to 4 decimals), ``measure`` (``SM activity``,
    ``utilisation`` or ``SM activity and utilisation``), ``memory_saving``, ``saving``, ``fixes``; money as
    decimal strings in cents that add up to the rounded totals, None when unpriced or not applicable."""
    money = {name: _cents([getattr(f, name) for f in findings]) for name in _FINDING_MONEY}
    rows = []
    for i, f in enumerate(findings):
        rows.append(
            {
                "job": f.job_id, "name": f.name, "scheduler": f.scheduler, "cluster": f.cluster, "user": f.user,
                "account": f.account, "team": f.team, "partition": f.partition,
                "start": f.start.isoformat() if f.start else None, "end": f.end.isoformat() if f.end else None,
                "gpu_model": f.gpu_model, "pricing_model": f.pricing_model,
                "gpus_requested": f.gpus_requested, "gpus_held": f.gpus_held, "gpus_busy": f.gpus_busy,
                "gpus_unmetered": f.gpus_unmetered, "gpus_suggested": f.gpus_suggested,
                "gpu_hours": _hours(f.gpu_seconds), "saved_gpu_hours": _hours(f.saved_gpu_seconds),
                "mean_utilization": _ratio(f.mean_utilization), "sm_active": _ratio(f.sm_active),
                "sm_active_share": _ratio(f.sm_active_share), "measure": f.measure,
                "memory_peak_gib": None if f.memory_peak_bytes is None else round(f.memory_peak_bytes / GIB, 3),
                "mig_profile": f.mig_profile, "smaller_model": f.smaller_model,
                "smaller_model_in_fleet": f.smaller_model_in_fleet,
                **{name: money[name][i] for name in _FINDING_MONEY},
                "currency": f.currency, "fixes": list(f.fixes), "notes": list(f.notes),
            }
        )  # fmt: skip
    return rows


_TOTAL_MONEY = ("count_saving", "memory_saving", "saving")


def total_dicts(totals: Sequence[RightsizingTotal], by: Literal["user", "team"]) -> list[dict[str, Any]]:
    """JSON-ready totals: ``{user|team, team (by user), jobs, gpu_hours, saved_gpu_hours, count_saving,
    memory_saving, saving, memory_unknown_jobs, unpriced_jobs, currency}``, money in cents as :func:`finding_dicts`."""
    money = {name: _cents([getattr(t, name) for t in totals]) for name in _TOTAL_MONEY}
    rows = []
    for i, t in enumerate(totals):
        row: dict[str, Any] = {by: t.key}
        if by == "user":
            row["team"] = t.team
        row.update(
            jobs=t.jobs,
            gpu_hours=_hours(t.gpu_seconds),
            saved_gpu_hours=_hours(t.saved_gpu_seconds),
            **{name: money[name][i] for name in _TOTAL_MONEY},
            memory_unknown_jobs=t.memory_unknown_jobs,
            unpriced_jobs=t.unpriced_jobs,
            currency=t.currency,
        )
        rows.append(row)
    return rows


def rightsizing_dicts(report: RightsizingReport, by: GroupBy) -> list[dict[str, Any]]:
    """The report's rows grouped ``by`` job (:func:`finding_dicts`), user or team (:func:`total_dicts`); ValueError
    for another ``by``."""
    if by == "job":
        return finding_dicts(report.findings)
    if by in ("user", "team"):
        return total_dicts(rightsizing_totals(report.findings, by), by)
    raise ValueError(f"group by must be one of {', '.join(GROUP_BYS)}, not {by!r}")


def rightsizing_csv(report: RightsizingReport, by: GroupBy) -> str:
    """The rows of :func:`rightsizing_dicts` as CSV with a header line (lists joined by `` | ``)."""
    rows = rightsizing_dicts(report, by)
    return dicts_csv([{k: " | ".join(v) if isinstance(v, list) else v for k, v in row.items()} for row in rows])


def rightsizing_table(report: RightsizingReport, by: GroupBy) -> str:
    """The report as a fixed-width text table with a TOTAL line, then (by job) each finding's measure when SM
    activity judged it (:func:`measure_line`), fixes and notes, and a line on the jobs examined and the thresholds."""
    rows = rightsizing_dicts(report, by)
    policy = report.policy
    footer = (
        f"{report.jobs_examined} jobs on whole GPUs examined ({report.jobs_unmetered} without readings, not judged); "
        f"a GPU's use: SM activity where measured, else utilisation; idle GPU: mean use ≤ {policy.idle_ratio:.0%}; "
        f"MIG slice or smaller model: mean ≤ "
        f"{policy.low_utilization_ratio:.0%} and memory peak × {policy.memory_headroom} fits; memory savings at "
        f"prices of {report.priced_at:%Y-%m-%d %H:%M} UTC"
    )
    if not rows:
        return f"No right-sizing findings in this period.\n{footer}"
    if by == "job":
        headers = ["job", "user", "team", "model", "GPUs", "busy", "→", "GPU-h", "saved GPU-h", "mem GiB", "MIG",
                   "smaller", "count saving", "memory saving", "saving"]  # fmt: skip
        keys = ["job", "user", "team", "gpu_model", "gpus_requested", "gpus_busy", "gpus_suggested", "gpu_hours",
                "saved_gpu_hours", "memory_peak_gib", "mig_profile", "smaller_model", "count_saving", "memory_saving",
                "saving"]  # fmt: skip
    else:
        headers = [by, *(["team"] if by == "user" else []), "jobs", "GPU-h", "saved GPU-h", "count saving",
                   "memory saving", "saving", "memory unknown"]  # fmt: skip
        keys = [by, *(["team"] if by == "user" else []), "jobs", "gpu_hours", "saved_gpu_hours", "count_saving",
                "memory_saving", "saving", "memory_unknown_jobs"]  # fmt: skip
    summed = {"gpu_hours", "saved_gpu_hours", "count_saving", "memory_saving", "saving", "jobs", "memory_unknown_jobs"}
    labels = 3 if by == "job" else (2 if by == "user" else 1)
    lines = [[_cell(row[k]) for k in keys] for row in rows]
    totals = ["TOTAL", *[""] * (labels - 1)]
    for k in keys[labels:]:
        if k not in summed:
            totals.append("")
            continue
        total = sum(Decimal(str(row[k] or 0)) for row in rows)
        totals.append(str(int(total)) if k in _COUNTS else _cell(total))
    widths = [max(len(h), *(len(line[i]) for line in [*lines, totals])) for i, h in enumerate(headers)]
    out = [f"Savings in {rows[0]['currency']}"]
    for line in [headers, *lines, totals]:
        out.append(
            "  ".join(c.ljust(w) if k in _TEXT else c.rjust(w) for k, c, w in zip(keys, line, widths, strict=True))
        )
    if by == "job":
        for row, finding in zip(rows, report.findings, strict=True):
            judged = measure_line(finding)
            for text in [*([judged] if judged else []), *row["fixes"], *row["notes"]]:
                out.append(f"{row['job']}: {text}")
    out.append(footer)
    return "\n".join(line.rstrip() for line in out)


_COUNTS = frozenset({"jobs", "memory_unknown_jobs"})
_TEXT = frozenset({"job", "user", "team", "gpu_model", "mig_profile", "smaller_model"})
"""Table columns aligned left; the others are numbers, aligned right."""


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (float, Decimal)):
        return f"{value:,.2f}"
    if isinstance(value, str) and value.replace(".", "", 1).lstrip("-").isdigit() and "." in value:
        return f"{Decimal(value):,.2f}"
    return str(value)
