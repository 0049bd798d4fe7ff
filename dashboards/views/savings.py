"""Savings: what the period's idle GPU time cost by probable waste reason, the jobs busy but inefficient (kernels
running, SMs mostly empty) with their probable bottleneck, what right-sizing the jobs would have saved, and per GPU
model the commitment (reserved GPUs) that costs least, with its cost curve. The numbers of ``gpu-finops report --by
reason``, ``--by efficiency``, ``gpu-finops rightsizing`` and ``gpu-finops commitments`` (and their REST endpoints),
from the same functions. Unpriced GPU-hours are shown with what fixes them, never counted as 0; a model
the commitments cannot analyse is listed with why and the fix. The commitments are fleet-wide: someone who sees one
team is told so instead (as the REST API refuses a team token)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from decimal import Decimal

import pandas as pd
import streamlit as st

from dashboards import charts, data, filters, login
from dashboards.format import Column, headline, money, table
from finops.analysis.filters import Scope
from finops.analysis.waste import NO_READING, REASONS
from finops.savings.commitment_cost import HOURS_PER_MONTH
from finops.savings.commitments import MAX_DAYS, SPOT_NOTE, CommitmentReport
from finops.savings.efficiency import EfficiencyReport
from finops.savings.efficiency_report import job_dicts
from finops.savings.rightsizing_policy import RightsizingReport
from finops.savings.rightsizing_report import GROUP_BYS, GroupBy, rightsizing_dicts
from finops.savings.waste_costs import BUSY_JOB_TITLE
from finops.timeutil import utc_now

BY_LABELS: dict[str, str] = {"job": "Job", "user": "User", "team": "Team"}
INEFFICIENT_COLUMNS: dict[str, Column] = {
    "sm_active": Column("SM activity", "share", help="Mean DCGM_FI_PROF_SM_ACTIVE over the profiled GPU-seconds"),
    "band": Column("Band", help="effective ≥ 0.8, moderate ≥ 0.5, ineffective below (NVIDIA DCGM guidance)"),
    "bottleneck": Column("Probable bottleneck", help="The first rule that holds (docs/efficiency.md)"),
    "usual_fix": Column("Usual fix"),
    "inactive_cost": Column(
        "Inactive cost ({currency})", "money", help="Allocated cost of the measured GPU-hours × (1 − SM activity)"
    ),
}
"""The busy-but-inefficient table's own columns."""


def _decimal(cents: str | None) -> Decimal | None:
    """A money field of the JSON rows (decimal text in cents, or None) as a Decimal."""
    return None if cents is None else Decimal(cents)


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def show_idle_by_reason(url: str, start: datetime, end: datetime, team: str | None) -> None:
    """The idle cost by reason of the period and team: headline, bars and table, and the unpriced GPU-hours."""
    st.subheader("Idle cost by waste reason")
    st.caption(
        "Each GPU-hour a job held goes to one probable reason (docs/waste-reasons.md): the reason of the idle "
        "episode that covers it, else the job's. The cost is the hour's **unused allocated cost** (allocated cost "
        f"× (1 − utilisation)); for **{REASONS[NO_READING].title}**, the allocated cost of GPU-hours without a "
        f"reading (whether they were used is unknown: not idle waste, so not in the idle cost's figure). "
        f"**{BUSY_JOB_TITLE.capitalize()}** is the unused share of jobs whose use is not low: not a reason to act "
        "on. So the rows add up to the Teams page's unused cost plus the cost of the held GPU-hours without readings."
    )
    spec, frame = data.reason_costs(url, start, end, team)
    if frame.empty:
        st.info(
            "No job held a GPU in this period, so there is no idle cost to explain. Choose a longer period (or "
            "another team); if jobs ran, import them (gpu-finops import sacct or pods) and roll the ledger up "
            "(gpu-finops rollup)."
        )
        return
    rows = data.idle_by_reason(url, start, end, team)
    currency = rows[0].currency
    unread = frame["reason"] == REASONS[NO_READING].title
    idle, without_readings = st.columns(2)
    total = sum((cost for cost in frame[~unread]["reason_cost"] if cost is not None), Decimal(0))
    headline("Idle cost, all reasons", total, currency, place=idle)
    if unread.any():
        unread_cost = sum((cost for cost in frame[unread]["reason_cost"] if cost is not None), Decimal(0))
        headline("Held without readings (not idle)", unread_cost, currency, place=without_readings)
    charts.render(spec)
    table(frame, "idle-cost-by-reason.csv", currency=currency)
    unpriced_hours = sum(frame["unpriced_gpu_hours"])
    if unpriced_hours:
        fixes = "; ".join(
            f"{u.model} ({u.gpu_hours:,.2f} GPU-hours without a price in the period, idle or not): {u.fix}"
            for u in data.unpriced(url, start, end, Scope(team=team))
        )
        st.warning(
            f"{unpriced_hours:,.2f} of these GPU-hours have no price, so their cost is not in the figures above (it "
            f"is unknown, not 0). By GPU model: {fixes}."
        )


def show_inefficient(report: EfficiencyReport) -> None:
    """The busy-but-inefficient jobs of the period, costliest first, with band, bottleneck, evidence and cost."""
    policy = report.policy
    st.caption(
        f"Jobs whose GPUs ran kernels at least {policy.busy_utilization_ratio:.0%} of the time while their SMs were "
        f"active less than {policy.ineffective_ratio:.0%} of it: NVIDIA's DCGM guidance reads SM activity below 0.5 "
        "as likely ineffective use, and 0.8 or more as necessary for effective use. Each has its probable "
        "bottleneck and the evidence (docs/efficiency.md). **Inactive cost** is the allocated cost of the GPU-hours "
        "that measured SM activity less their SM-active cost (allocated × SM activity): what the empty SMs cost."
    )
    unmeasured = sum(1 for job in report.jobs if job.sm_active is None)
    if not report.inefficient:
        st.info(
            f"No busy-but-inefficient job in this period ({len(report.jobs)} jobs examined, {unmeasured} without SM "
            "activity: not measured, never listed). SM activity needs the DCGM profiling fields or NVML GPM "
            "(Hopper and later) on the collector (docs/collector.md)."
        )
        return
    currency = report.inefficient[0].currency
    headline("Inactive cost of busy jobs", sum((job.inactive_cost or Decimal(0) for job in report.inefficient),
                                               Decimal(0)), currency)  # fmt: skip
    st.caption(
        f"{len(report.inefficient)} busy-but-inefficient jobs of {len(report.jobs)} examined; {unmeasured} without "
        "SM activity (not measured: never listed)."
    )
    frame = pd.DataFrame(
        [
            {
                "job": d["job_id"],
                "user": d["user"],
                "team": d["team"],
                "GPUs": d["gpus"],
                "utilization": d["mean_utilization"],
                "sm_active": d["sm_active_ratio"],
                "band": d["band"],
                "bottleneck": d["title"],
                "evidence": d["evidence"],
                "usual_fix": d["fix"],
                "allocated_cost": _decimal(_text(d["allocated_cost"])),
                "inactive_cost": _decimal(_text(d["inactive_cost"])),
            }
            for d in job_dicts(report.inefficient)
        ]
    )
    table(frame, "busy-but-inefficient.csv", currency=currency, columns=INEFFICIENT_COLUMNS)


def show_rightsizing(report: RightsizingReport, by: GroupBy) -> None:
    """The right-sizing findings of the period grouped ``by`` job, user or team, with the saving and the fixes."""
    policy = report.policy
    st.caption(
        f"Jobs on whole GPUs that kept fewer GPUs busy than they asked for (a GPU whose mean utilisation is at most "
        f"{policy.idle_ratio:.0%} is idle; the saving is the ledger cost of the GPUs a request of the busy ones, at "
        f"least 1, would not have held), and jobs whose GPUs averaged at most {policy.low_utilization_ratio:.0%} "
        f"and whose memory peak × {policy.memory_headroom} fits a MIG slice or a cheaper GPU model (the saving at "
        f"the prices of {report.priced_at:%Y-%m-%d %H:%M} UTC). A job's saving is its fewer-GPUs saving plus the "
        "larger of the two others. The fix is the request line of its job script or pod spec "
        "(docs/cost-model.md#right-sizing)."
    )
    examined = (
        f"{report.jobs_examined} job{'s' if report.jobs_examined != 1 else ''} on whole GPUs examined, "
        f"{report.jobs_unmetered} without readings (not judged)"
    )
    if not report.findings:
        st.info(
            f"No right-sizing findings in this period: {examined}. Jobs that held MIG slices are not judged; jobs "
            "without readings need a collector on their nodes (docs/collector.md)."
        )
        return
    currency = min(f.currency for f in report.findings)
    headline("Right-sizing saving", sum((f.saving or Decimal(0) for f in report.findings), Decimal(0)), currency)
    st.caption(f"{len(report.findings)} jobs with a finding; {examined}.")
    rows = rightsizing_dicts(report, by)
    money_fields = ("count_saving", "memory_saving", "saving")
    if by == "job":
        frame = pd.DataFrame(
            [
                {
                    "job": r["job"],
                    "user": r["user"],
                    "team": r["team"],
                    "model": r["gpu_model"],
                    "gpus_requested": r["gpus_requested"],
                    "gpus_busy": r["gpus_busy"],
                    "gpus_suggested": r["gpus_suggested"],
                    "GPU-hours": round(r["gpu_hours"], 2),
                    "saved_gpu_hours": round(r["saved_gpu_hours"], 2),
                    "memory_peak_gib": r["memory_peak_gib"],
                    "mig_profile": r["mig_profile"] or "",
                    "smaller_model": r["smaller_model"] or "",
                    **{name: _decimal(r[name]) for name in money_fields},
                    "fixes": " · ".join(r["fixes"]),
                    "notes": " · ".join(r["notes"]),
                }
                for r in rows
            ]
        )
    else:
        frame = pd.DataFrame(
            [
                {
                    by: r[by],
                    **({"team": r["team"] or ""} if by == "user" else {}),
                    "jobs": r["jobs"],
                    "GPU-hours": round(r["gpu_hours"], 2),
                    "saved_gpu_hours": round(r["saved_gpu_hours"], 2),
                    **{name: _decimal(r[name]) for name in money_fields},
                    "memory_unknown_jobs": r["memory_unknown_jobs"],
                    "unpriced_jobs": r["unpriced_jobs"],
                }
                for r in rows
            ]
        )
    table(frame, f"rightsizing-by-{by}.csv", currency=currency)


def commitment_window(start: datetime, end: datetime, now: datetime) -> tuple[datetime, int]:
    """The end and whole days of the commitments' window for the period [start, end) at ``now``: ending at the
    period's end, or at the current hour while the period runs (the hour under way is not whole), and the fewest
    whole days that reach back to the period's start (1 to :data:`~finops.savings.commitments.MAX_DAYS`)."""
    stop = min(end, now.replace(minute=0, second=0, microsecond=0))
    days = math.ceil((stop - start) / timedelta(days=1))
    return stop, min(MAX_DAYS, max(1, days))


def show_commitments(report: CommitmentReport, url: str, end: datetime, days: int) -> None:
    """The commitment of each rented GPU model, one model's cost curve, and the models not analysed."""
    currency = report.currency
    st.caption(
        f"Fleet-wide (every team; the team filter does not narrow it): the GPUs jobs held in each hour from "
        f"{report.start:%Y-%m-%d %H:%M} to {report.end:%Y-%m-%d %H:%M} UTC, the whole days that cover the period. "
        f"A commitment of Q GPUs costs Q × hours × the reserved rate, used or not, plus the GPU-hours held beyond Q "
        f"at the on-demand rate; the quantity that costs least is marked, and its saving against holding every "
        f"GPU-hour on demand is scaled to a {HOURS_PER_MONTH}-hour month. Rates of the price catalogue in force at "
        f"{report.end:%Y-%m-%d %H:%M} UTC (docs/cost-model.md#commitments)."
    )
    pending = report.ledger_hours_pending
    if pending:
        st.caption(
            f"{pending} ledger hour{'s' if pending != 1 else ''} of the window {'are' if pending != 1 else 'is'} "
            "waiting for a rollup: these figures may still change (gpu-finops rollup)."
        )
    if not report.commitments and not report.not_analysed:
        st.info(
            "No rented GPU was held by a job in this window, so there is nothing to commit to. Owned (on-prem) GPUs "
            "are compared with renting by gpu-finops commitments."
            if report.on_prem
            else "No GPU was held by a job in this window. Choose a longer period; if jobs ran, import them and roll "
            "the ledger up (gpu-finops rollup)."
        )
    if report.commitments:
        headline(
            "Commitment saving per month", sum((c.best.saving_per_month for c in report.commitments), Decimal(0)),
            currency,
        )  # fmt: skip
        frame = pd.DataFrame(
            [
                {
                    "model": c.model,
                    "hours_in_window": c.demand.hours,
                    "mean_gpus": round(c.mean_gpus, 1),
                    "peak_gpus": c.demand.peak_gpus,
                    "on_demand_rate": c.on_demand_rate,
                    "reserved_rate": c.reserved_rate,
                    "commit": c.best.quantity,
                    "commitment_use": c.best.utilisation,
                    "on_demand_cost": c.best.baseline_cost.quantize(Decimal("0.01")),
                    "committed_cost": c.best.cost.quantize(Decimal("0.01")),
                    "saving_per_month": c.best.saving_per_month.quantize(Decimal("0.01")),
                    "spot_commit": None if c.spot_overflow is None else c.spot_overflow.quantity,
                    "spot_saving_per_month": (
                        None if c.spot_overflow is None else c.spot_overflow.saving_per_month.quantize(Decimal("0.01"))
                    ),
                }
                for c in report.commitments
            ]
        )
        table(frame, "commitments.csv", currency=currency)
        if any(c.spot_overflow is not None for c in report.commitments):
            st.caption(
                "Overflow on spot: the commitment that costs least when the GPU-hours beyond it are bought at the "
                f"spot rate (a quantity of its own), its saving also against all on demand; {SPOT_NOTE}."
            )
        models = [c.model for c in report.commitments]
        model = filters.url_selectbox("model", "GPU model (largest saving first)", models, container=st.container())
        chosen = next(c for c in report.commitments if c.model == model)
        charts.render(data.commitment_curve(url, end, days, model))
        best = chosen.best
        share = best.utilisation
        use = "" if share is None else f"; jobs would have held {share:.1%} of the committed GPU-hours"
        st.caption(
            f"{model}: the cost is least at **{best.quantity} committed GPUs**: {money(best.cost, currency)} over "
            f"the window against {money(best.baseline_cost, currency)} all on demand, a saving of "
            f"**{money(best.saving_per_month, currency)} per month**{use}. Each point is the cost of committing that "
            "many GPUs; beyond the peak it only grows."
        )
    if report.not_analysed:
        st.warning(
            f"{len(report.not_analysed)} GPU model{'s' if len(report.not_analysed) != 1 else ''} could not be "
            "analysed: their demand is in no figure above. The table says why and what fixes it."
        )
        frame = pd.DataFrame(
            [
                {"model": n.model, "section": n.section, "why": n.reason, "what_fixes_it": n.fix}
                for n in report.not_analysed
            ]
        )
        table(frame, "commitments-not-analysed.csv")


st.title("Savings")
view = filters.sidebar(cluster=False, partition=False)
url = data.database_url()
st.caption(
    f"{view.describe()} · idle cost by reason is kept per team (as gpu-finops report --by reason), so this page "
    "filters by team only."
)
show_idle_by_reason(url, view.start, view.end, view.team)

st.subheader("Busy but inefficient")
show_inefficient(data.efficiency(url, view.start, view.end, view.team))

st.subheader("Right-sizing")
chosen = filters.url_selectbox(
    "by", "Right-sizing by", list(GROUP_BYS), format_func=BY_LABELS.__getitem__, container=st.container()
)
by = next(group for group in GROUP_BYS if group == chosen)
now = utc_now().replace(second=0, microsecond=0)
show_rightsizing(data.rightsizing_report(url, view.start, view.end, now, view.team), by)

st.subheader("Commitments")
if not login.current().sees_everything:
    st.info(
        "The commitments are the whole fleet's (every team's GPU demand), so they are shown to viewers and admins "
        "only, as the REST API's /api/v1/commitments is. Ask for a viewer group to see them."
    )
    st.stop()
end, days = commitment_window(view.start, view.end, now)
show_commitments(data.commitments(url, end, days), url, end, days)
