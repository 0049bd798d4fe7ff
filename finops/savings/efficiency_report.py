"""The efficiency report (:mod:`finops.savings.efficiency`) as JSON-ready rows, CSV and a fixed-width table: what
``gpu-finops report --by efficiency`` and ``GET /api/v1/efficiency`` give.

Ratios are shown to 4 decimals (JSON) or as percentages (table), ``null`` / ``not measured`` where nothing measured
them; money in cents by :func:`finops.ledger.costmodel.round_preserving_total` per column over the rows that have an
amount, so the rows add up to their rounded total; ``null`` / ``unpriced`` where the GPU-hours have no price.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from finops.analysis.report_format import dicts_csv
from finops.ledger.costmodel import round_preserving_total
from finops.savings.efficiency import ACTIVITIES, EfficiencyReport, JobEfficiency, TeamEfficiency
from finops.savings.efficiency_policy import BANDS, NOT_MEASURED
from finops.savings.waste_tables import aligned


def _cents(amounts: Sequence[Decimal | None]) -> list[str | None]:
    """``amounts`` in cents (decimal strings) adding up to their rounded total; None kept."""
    known = [i for i, amount in enumerate(amounts) if amount is not None]
    rounded = round_preserving_total([amounts[i] or Decimal(0) for i in known])
    out: list[str | None] = [None] * len(amounts)
    for i, amount in zip(known, rounded, strict=True):
        out[i] = str(amount)
    return out


def _ratio(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _slug(band: str) -> str:
    return band.replace(" ", "_")


def team_dicts(teams: Sequence[TeamEfficiency]) -> list[dict[str, object]]:
    """JSON-ready team rows: ``{team, band, sm_active_ratio, tensor_active_ratio, dram_active_ratio,
    profiled_share, gpu_hours, allocated_cost, sm_active_cost, inactive_cost, <band>_jobs and <band>_cost per band
    (``not_measured_jobs`` …), inefficient_jobs, inefficient_cost, currency}``."""
    money = {
        name: _cents([getattr(team, name) for team in teams])
        for name in ("allocated_cost", "sm_active_cost", "inactive_cost", "inefficient_cost")
    }
    bands = {band: _cents([team.band_costs[band] for team in teams]) for band in BANDS}
    rows = []
    for i, team in enumerate(teams):
        row: dict[str, object] = {
            "team": team.team,
            "band": team.band,
            **{f"{name}_ratio": _ratio(team.mean(name)) for name in ("sm_active", "tensor_active", "dram_active")},
            "profiled_share": _ratio(team.profiled_share),
            "gpu_hours": round(team.gpu_seconds / 3600, 6),
            "allocated_cost": money["allocated_cost"][i],
            "sm_active_cost": money["sm_active_cost"][i],
            "inactive_cost": money["inactive_cost"][i],
        }
        for band in BANDS:
            row[f"{_slug(band)}_jobs"] = team.band_jobs[band]
            row[f"{_slug(band)}_cost"] = bands[band][i]
        row.update(
            inefficient_jobs=team.inefficient_jobs,
            inefficient_cost=money["inefficient_cost"][i],
            currency=team.currency,
        )
        rows.append(row)
    return rows


def job_dicts(jobs: Sequence[JobEfficiency]) -> list[dict[str, object]]:
    """JSON-ready job rows: ``{job_id, name, team, user, gpus, gpu_hours, mean_utilization, band, <activity>_ratio
    for every activity of :data:`~finops.savings.efficiency.ACTIVITIES`, profiled_share, allocated_cost,
    sm_active_cost, inactive_cost, unpriced_gpu_hours, currency, bottleneck, title, evidence, fix}`` (the last four
    null for a job that is not busy but inefficient)."""
    money = {
        name: _cents([getattr(job, name) for job in jobs])
        for name in ("allocated_cost", "sm_active_cost", "inactive_cost")
    }
    rows: list[dict[str, object]] = []
    for i, job in enumerate(jobs):
        found = job.bottleneck
        rows.append(
            {
                "job_id": job.job_id,
                "name": job.name,
                "team": job.team,
                "user": job.user,
                "gpus": job.gpus,
                "gpu_hours": round(job.gpu_seconds / 3600, 6),
                "mean_utilization": _ratio(job.utilization),
                "band": job.band,
                **{f"{name}_ratio": _ratio(job.mean(name)) for name in ACTIVITIES},
                "profiled_share": _ratio(job.profiled_share),
                **{name: amounts[i] for name, amounts in money.items()},
                "unpriced_gpu_hours": round(job.unpriced_gpu_seconds / 3600, 6),
                "currency": job.currency,
                "bottleneck": None if found is None else found.key,
                "title": None if found is None else found.title,
                "evidence": None if found is None else found.evidence,
                "fix": None if found is None else found.fix,
            }
        )
    return rows


def efficiency_dict(report: EfficiencyReport) -> dict[str, object]:
    """The report as JSON: ``{start, end, thresholds: {effective, ineffective, busy_utilization}, teams (
    :func:`team_dicts`), inefficient (:func:`job_dicts` of the busy-but-inefficient jobs, costliest first)}``."""
    policy = report.policy
    return {
        "start": report.start.isoformat(),
        "end": report.end.isoformat(),
        "thresholds": {
            "effective": policy.effective_ratio,
            "ineffective": policy.ineffective_ratio,
            "busy_utilization": policy.busy_utilization_ratio,
        },
        "teams": team_dicts(report.teams),
        "inefficient": job_dicts(report.inefficient),
    }


def efficiency_csv(report: EfficiencyReport) -> str:
    """The busy-but-inefficient jobs of :func:`job_dicts` as CSV text with a header line (empty without any)."""
    return dicts_csv(job_dicts(report.inefficient))


def _percent(ratio: float | None) -> str:
    return NOT_MEASURED if ratio is None else f"{ratio:.1%}"


def _money(cents: object) -> str:
    return "unpriced" if cents is None else f"{Decimal(str(cents)):,.2f}"


def efficiency_table(report: EfficiencyReport, jobs_shown: int = 10) -> str:
    """The report as fixed-width text: per team its band, SM/tensor/DRAM activity, profiled share, allocated,
    SM-active and inactive cost and the allocated cost of its jobs per band; then the ``jobs_shown`` costliest
    busy-but-inefficient jobs with their bottleneck and evidence."""
    if not report.teams:
        return "No job-held GPU-hours in this period."
    policy = report.policy
    currency = report.teams[0].currency
    out = [
        f"Efficiency by team, costs in {currency}: bands by SM activity (effective ≥ {policy.effective_ratio:g}, "
        f"moderate ≥ {policy.ineffective_ratio:g}, ineffective below; NVIDIA DCGM guidance)"
    ]
    headers = ["team", "band", "SM active", "tensor", "DRAM", "profiled", "allocated", "SM-active", "inactive",
               *(f"{band} cost" for band in BANDS)]  # fmt: skip
    rows = [headers]
    for team, d in zip(report.teams, team_dicts(report.teams), strict=True):
        rows.append(
            [team.team, team.band, *(_percent(team.mean(n)) for n in ("sm_active", "tensor_active", "dram_active")),
             _percent(team.profiled_share), _money(d["allocated_cost"]),
             *(NOT_MEASURED if d[n] is None else _money(d[n]) for n in ("sm_active_cost", "inactive_cost")),
             *(_money(d[f"{_slug(band)}_cost"]) for band in BANDS)]
        )  # fmt: skip
    out += aligned(rows, left=2)
    if not report.inefficient:
        out += ["", f"No busy-but-inefficient job (utilisation ≥ {policy.busy_utilization_ratio:g} with SM activity "
                    f"below {policy.ineffective_ratio:g}) in this period."]  # fmt: skip
        return "\n".join(out)
    shown = report.inefficient[:jobs_shown]
    count = f"{len(shown)} of {len(report.inefficient)}"
    out += ["", f"Busy but inefficient (utilisation ≥ {policy.busy_utilization_ratio:g}, SM activity below "
                f"{policy.ineffective_ratio:g}), costliest first ({count}):"]  # fmt: skip
    jobs = [["job", "team", "user", "GPUs", "util", "SM active", "allocated", "inactive", "probable bottleneck"]]
    for job, d in zip(shown, job_dicts(shown), strict=True):
        found = job.bottleneck
        jobs.append(
            [job.job_id, job.team, job.user, str(job.gpus), _percent(job.utilization), _percent(job.sm_active),
             _money(d["allocated_cost"]), NOT_MEASURED if d["inactive_cost"] is None else _money(d["inactive_cost"]),
             "" if found is None else f"{found.title}: {found.evidence}"]
        )  # fmt: skip
    out += aligned(jobs, left=3, last_free=True)
    return "\n".join(out)
