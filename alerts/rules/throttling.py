"""The ``throttling`` rule: allocated GPUs held at a thermal or power clocks-event reason for at least ``for``."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import or_, select, text
from sqlalchemy.orm import Session

from alerts.config import ThrottlingConfig
from alerts.rules.candidate import Candidate, duration_text, team_label
from collector.contract.clocks_events import POWER_MASK, THERMAL_MASK
from finops.db.models import Allocation, Gpu, Job, Node, Team
from finops.timeutil import from_epoch, to_epoch

THROTTLE_LOOKBACK = timedelta(hours=1)
"""How far back throttling runs are looked for; a run reaching further back counts from the window's start."""

_THROTTLE_RUNS = text("""
WITH recent AS (
    SELECT gpu_id, ts, clocks_event_reasons AS r FROM gpu_samples WHERE ts >= :since AND ts <= :now
), latest AS (
    SELECT gpu_id, MAX(ts) AS last_ts,
           MAX(CASE WHEN r IS NULL OR (r & :mask) = 0 THEN ts END) AS last_clear
    FROM recent GROUP BY gpu_id
)
SELECT l.gpu_id, l.last_ts, MIN(s.ts) AS run_start,
       MAX(CASE WHEN (s.r & :thermal) <> 0 THEN 1 ELSE 0 END) AS thermal,
       MAX(CASE WHEN (s.r & :power) <> 0 THEN 1 ELSE 0 END) AS power
FROM latest l JOIN recent s ON s.gpu_id = l.gpu_id AND s.ts > COALESCE(l.last_clear, -1)
WHERE l.last_clear IS NULL OR l.last_clear < l.last_ts
GROUP BY l.gpu_id, l.last_ts
HAVING l.last_ts - MIN(s.ts) >= :hold
""")

_LAST_READING = text("SELECT temperature_celsius, power_watts FROM gpu_samples WHERE gpu_id = :gpu AND ts = :ts")


def throttling_candidates(
    session: Session, now: datetime, config: ThrottlingConfig, stale_after_seconds: float
) -> list[Candidate]:
    """One candidate per allocated GPU throttled for at least ``config.for_`` up to its newest reading, that
    reading less than ``stale_after_seconds`` old (rule in the module docstring); labelled with node, GPU
    index, job and team."""
    hold = int(config.for_.total_seconds())
    runs = session.execute(
        _THROTTLE_RUNS,
        {
            "since": to_epoch(now - THROTTLE_LOOKBACK),
            "now": to_epoch(now),
            "mask": THERMAL_MASK | POWER_MASK,
            "thermal": THERMAL_MASK,
            "power": POWER_MASK,
            "hold": hold,
        },
    ).all()
    if not runs:
        return []
    by_gpu = {run.gpu_id: run for run in runs}
    found = []
    holders = session.execute(
        select(
            Allocation.gpu_id,
            Allocation.start,
            Allocation.end,
            Job.job_id,
            Job.user,
            Team.name,
            Node.hostname,
            Gpu.gpu_index,
            Gpu.uuid,
        )
        .join(Job, Job.id == Allocation.job_pk)
        .join(Team, Team.id == Job.team_id)
        .join(Gpu, Gpu.id == Allocation.gpu_id)
        .join(Node, Node.id == Gpu.node_id)
        .where(
            Allocation.gpu_id.in_(by_gpu),
            Allocation.start <= now,
            or_(Allocation.end.is_(None), Allocation.end > now - THROTTLE_LOOKBACK),
        )
    ).all()
    for gpu_id, a_start, a_end, job_id, user, team, node, index, uuid in holders:
        run = by_gpu[gpu_id]
        last = int(run.last_ts)
        if to_epoch(now) - last >= stale_after_seconds:
            continue
        if not (to_epoch(a_start) <= last and (a_end is None or last < to_epoch(a_end))):
            continue
        start = max(int(run.run_start), to_epoch(a_start))
        if last - start < hold:
            continue
        reasons = [name for name, on in (("thermal", run.thermal), ("power", run.power)) if on]
        reading = session.execute(_LAST_READING, {"gpu": gpu_id, "ts": last}).first()
        temperature = None if reading is None else reading.temperature_celsius
        watts = None if reading is None else reading.power_watts
        throttled_for = duration_text(last - start)
        summary = (
            f"GPU {index} on {node} (job {job_id}, team {team}) has been {' and '.join(reasons)} throttled for "
            f"{throttled_for}: its clocks are held down, so the job runs slower at the same cost."
        )
        fields = [
            ["Team", team],
            ["Job", job_id],
            ["Node", node],
            ["GPU", str(index)],
            ["Reason", " and ".join(reasons)],
            ["Throttled for", throttled_for],
        ]
        if temperature is not None:
            fields.append(["Temperature", f"{temperature:.0f} °C"])
        if watts is not None:
            fields.append(["Power", f"{watts:.0f} W"])
        found.append(
            Candidate(
                rule="throttling",
                labels={**team_label(team), "node": node, "gpu": str(index), "job": job_id},
                annotations={
                    "title": f"GPU throttled: {node} GPU {index}",
                    "name": f"{node} GPU {index}",
                    "summary": summary,
                    "fields": fields,
                    "page": "gpus",
                },
                figures={
                    "uuid": uuid,
                    "reasons": reasons,
                    "since": from_epoch(start).isoformat(),
                    "temperature_celsius": temperature,
                    "power_watts": watts,
                    "user": user,
                },
                starts_at=from_epoch(start + hold),
            )
        )
    return found
