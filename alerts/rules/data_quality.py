"""The ``data-quality`` rule: GPU time of jobs the service does not know, or with no reading, above a share."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from alerts.config import DataQualityConfig
from alerts.rules.candidate import Candidate
from finops.analysis.quality import coverage, unattributed_causes, without_readings
from finops.analysis.report import cost_report


def data_quality_candidates(
    session: Session, now: datetime, config: DataQualityConfig, idle_threshold: float
) -> list[Candidate]:
    """One candidate when, over [now − period, now), the data behind the costs has a problem, as shares of the
    period's in-service GPU time: GPU time that ran jobs the service does not know above
    ``max_unknown_job_share`` (:func:`finops.analysis.quality.unattributed_causes`, readings above ``idle_threshold``
    utilisation are busy), or GPU time with no reading at all above ``max_no_reading_share``
    (:func:`finops.analysis.quality.without_readings`). Its message names each problem over its limit with the fix,
    and the idle capacity (no job on the GPU) as normal; idle capacity alone never fires it."""
    start = now - config.period
    found = coverage(cost_report(session, start, now, "team"))
    capacity = found.capacity_gpu_seconds
    if not capacity:
        return []
    causes = unattributed_causes(session, start, now, idle_threshold)
    unknown = causes.unknown_job_gpu_seconds / capacity
    unread_nodes = without_readings(session, start, now)
    unread = sum(n.gpu_seconds for n in unread_nodes) / capacity
    unknown_over = unknown > config.max_unknown_job_share
    unread_over = unread > config.max_no_reading_share
    if not (unknown_over or unread_over):
        return []
    no_job = causes.no_job_gpu_seconds / capacity
    hours = capacity / 3600
    since = f"the {hours:,.1f} GPU-hours since {start:%Y-%m-%d %H:%M} UTC"
    titles, sentences = [], []
    if unknown_over:
        titles.append(f"{unknown:.0%} of GPU time ran unknown jobs")
        sentences.append(
            f"{unknown:.1%} of {since} ran jobs the service does not know (readings that name a job or show the GPU "
            f"busy while no imported job held it; limit {config.max_unknown_job_share:.0%}), so their cost goes to "
            "__unallocated__ instead of a team. Check that the job import (sacct or Kubernetes) runs, and that the "
            "job ids the collectors read are those of the imported jobs."
        )
    more = f" and {len(unread_nodes) - 5} more" if len(unread_nodes) > 5 else ""
    if unread_over:
        worst = ", ".join(f"{n.node} ({n.gpu_seconds / 3600:,.1f} GPU-h)" for n in unread_nodes[:5])
        held = sum(n.held_gpu_seconds for n in unread_nodes) / 3600
        titles.append(f"{unread:.0%} of GPU time without readings")
        sentences.append(
            f"{unread:.1%} of {since} had no reading at all (limit {config.max_no_reading_share:.0%}), "
            f"{held:,.1f} GPU-hours of it held by jobs whose use and idle cost are therefore unknown: {worst}{more}. "
            "Check that the collector runs on these nodes and reaches the service (gpu-finops collector, "
            "docs/collector.md)."
        )
    sentences.append(f"Idle capacity (no job on the GPU, normal, not a problem): {no_job:.1%}.")
    fields = [
        ["Unknown jobs", f"{unknown:.1%} (limit {config.max_unknown_job_share:.0%})"],
        ["Without readings", f"{unread:.1%} (limit {config.max_no_reading_share:.0%})"],
        ["Nodes without readings", (", ".join(n.node for n in unread_nodes[:5]) + more) or "—"],
        ["Idle capacity (normal)", f"{no_job:.1%}"],
        ["GPU-hours", f"{hours:,.1f}"],
        ["Metered share of held time", f"{found.metered_share:.1%}"],
    ]
    return [
        Candidate(
            rule="data-quality",
            labels={},
            annotations={
                "title": "Data quality: " + "; ".join(titles),
                "name": "cluster",
                "summary": " ".join(sentences),
                "fields": fields,
                "page": "quality",
            },
            figures={
                "unknown_job_share": round(unknown, 6),
                "no_reading_share": round(unread, 6),
                "no_job_share": round(no_job, 6),
                "unattributed_share": round(1 - found.attributed_share, 6),
                "capacity_gpu_seconds": capacity,
                "metered_share": round(found.metered_share, 6),
                "nodes_without_readings": {n.node: n.gpu_seconds for n in unread_nodes},
            },
            starts_at=now,
        )
    ]
