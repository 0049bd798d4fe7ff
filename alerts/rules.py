"""The alert rules: what is true in the data right now, as candidate alerts.

Each rule function reads the database (or the events taken from :mod:`finops.analysis.events`) and returns the alerts
whose condition holds at ``now``; :func:`alerts.engine.evaluate` turns them into stored alert instances (new,
still firing, or resolved when a rule stops returning them).

- ``budget-50`` / ``budget-80`` / ``budget-100`` / ``budget-forecast`` / ``spend-anomaly``: one alert per event;
  a budget alert lasts until its month ends, an anomaly until the end of the day after the anomalous day.
- ``idle-gpu``: idle episodes (:mod:`finops.analysis.idle`, already at least the idle window long) still open at ``now``
  (their end within the idle max gap of ``now``), one alert per job with its GPUs, cost so far, owner and probable
  waste reason with its evidence (:mod:`finops.analysis.waste`; that of its open episodes with the most GPU-time)
  (an episode on a GPU whose model has no price is said unpriced, with the fix, never counted as 0).
- ``throttling``: an allocated GPU whose readings show a thermal (``sw_thermal``, ``hw_thermal``,
  ``hw_slowdown``) or power (``sw_power_cap``, ``hw_power_brake``) clocks-event reason on every reading from
  the first throttled reading after its newest unthrottled one to its newest reading, at least ``for`` apart,
  the newest reading younger than the collector-silent threshold (NVML ``nvmlClocksEventReason*`` bits,
  :data:`collector.contract.clocks_events.CLOCKS_EVENT_REASONS`).
- ``collector-silent``: a node that has reported (its GPUs have UUIDs) with no reading for ``intervals`` ×
  the collector interval; ``gpu-lost``: a GPU with no reading for as long while its node still reports.
- ``data-quality``: over the last ``period``, the share of GPU time that ran jobs the service does not know above
  ``max_unknown_job_share`` (a job import or job id problem: :func:`finops.analysis.quality.unattributed_causes`),
  or the share with no reading at all above ``max_no_reading_share`` (silent or missing collectors, by node:
  :func:`finops.analysis.quality.without_readings`), each with its fix; idle capacity (no job on the GPU) is
  normal, said in the message, and never fires it.

Names (teams, users, jobs, nodes) are shown exactly as stored: never re-cased.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import or_, select, text
from sqlalchemy.orm import Session

from alerts.config import DataQualityConfig, SilenceConfig, ThrottlingConfig
from collector.contract.clocks_events import POWER_MASK, THERMAL_MASK
from finops.analysis.events import BUDGET_FORECAST, BUDGET_THRESHOLD, SPEND_ANOMALY, EventView
from finops.analysis.idle import EpisodeView, list_episodes
from finops.analysis.quality import coverage, unattributed_causes, without_readings
from finops.analysis.report import cost_report
from finops.analysis.waste import RULES, Verdict
from finops.db.models import Allocation, Gpu, Job, Node, Team
from finops.timeutil import from_epoch, next_month_start, to_epoch

THROTTLE_LOOKBACK = timedelta(hours=1)
"""How far back throttling runs are looked for; a run reaching further back counts from the window's start."""
SILENCE_LOOKBACK = timedelta(hours=24)
"""Readings older than this are not searched for: a node silent longer is silent since "more than a day"."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """An alert whose condition holds: ``labels`` identify it (``rule`` and ``severity`` are added by the
    engine), ``annotations`` say it (``title``, ``name``, ``summary``, ``fields``, dashboard ``page``),
    ``figures`` are the numbers (money as decimal strings). ``starts_at``: when the condition became true;
    ``ends_at``: when an event alert ends by itself (None: a condition, ended when it stops holding)."""

    rule: str
    labels: dict[str, str]
    annotations: dict[str, Any]
    figures: dict[str, Any] = field(default_factory=dict)
    starts_at: datetime = datetime(1970, 1, 1, tzinfo=UTC)
    ends_at: datetime | None = None


def money(amount: Decimal | str, currency: str) -> str:
    """``1234.5`` → ``"1,234.50 USD"`` (two decimals, half-even as Decimal formats)."""
    return f"{Decimal(amount):,.2f} {currency}".strip()


def duration_text(seconds: float) -> str:
    """``5400`` → ``"1 h 30 min"``; under an hour ``"45 min"``; under a minute ``"40 s"``."""
    seconds = max(int(seconds), 0)
    if seconds < 60:
        return f"{seconds} s"
    hours, minutes = divmod(seconds // 60, 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min"


def _team_label(team: str | None) -> dict[str, str]:
    return {"team": team} if team else {}


# --- events: budgets and spend anomalies -------------------------------------------------------------------


def event_candidates(events: Sequence[EventView]) -> list[Candidate]:
    """One candidate per budget threshold, budget forecast or spend anomaly event (others are skipped)."""
    found = []
    for event in events:
        payload = event.payload
        if event.kind in (BUDGET_THRESHOLD, BUDGET_FORECAST):
            found.append(_budget_candidate(event, payload))
        elif event.kind == SPEND_ANOMALY:
            found.append(_anomaly_candidate(event, payload))
    return found


def _budget_candidate(event: EventView, p: dict[str, Any]) -> Candidate:
    team, project, month, currency = str(p["team"]), str(p.get("project") or ""), str(p["month"]), str(p["currency"])
    month_start = datetime.strptime(f"{month}-01", "%Y-%m-%d").replace(tzinfo=UTC)
    scope = team + (f", project {project}" if project else "")
    who = f"team {scope}"
    spent, budget, forecast = money(p["spent"], currency), money(p["budget"], currency), money(p["forecast"], currency)
    if event.kind == BUDGET_THRESHOLD:
        threshold = int(p["threshold_percent"])
        rule = f"budget-{threshold}"
        title = f"Budget {threshold} % reached: {who}"
        summary = f"Team {scope} has spent {spent} of its {budget} budget for {month} ({p['used_percent']} %)."
    else:
        rule = "budget-forecast"
        title = f"Budget forecast above budget: {who}"
        summary = (
            f"At the current run rate {who} will spend {forecast} in {month}, above its {budget} budget "
            f"({p['used_percent']} % spent so far)."
        )
    fields = [
        ["Team", team],
        *([["Project", project]] if project else []),
        ["Month", month],
        ["Spent", spent],
        ["Budget", budget],
        ["Used", f"{p['used_percent']} %"],
        ["Forecast month-end", forecast],
    ]
    labels = {"team": team, "month": month, **({"project": project} if project else {})}
    return Candidate(
        rule=rule,
        labels=labels,
        annotations={"title": title, "name": who, "summary": summary, "fields": fields, "page": "teams"},
        figures=dict(p),
        starts_at=event.occurred_at,
        ends_at=next_month_start(month_start),
    )


def _anomaly_candidate(event: EventView, p: dict[str, Any]) -> Candidate:
    team, day, currency = str(p["team"]), str(p["day"]), str(p["currency"])
    spend, median = money(p["spend"], currency), money(p["baseline_median"], currency)
    z = p.get("z_score")
    summary = f"Team {team} spent {spend} on {day}, against a median of {median} a day over the 14 days before" + (
        f" (modified z-score {z})." if z is not None else " (a flat baseline)."
    )
    fields = [["Team", team], ["Day", day], ["Spend", spend], ["Baseline median", median]]
    if z is not None:
        fields.append(["Modified z-score", str(z)])
    return Candidate(
        rule="spend-anomaly",
        labels={"team": team, "day": day},
        annotations={
            "title": f"Spend anomaly: team {team} on {day}",
            "name": f"team {team} on {day}",
            "summary": summary,
            "fields": fields,
            "page": "teams",
        },
        figures=dict(p),
        starts_at=event.occurred_at,
        ends_at=datetime.combine(date.fromisoformat(day) + timedelta(days=2), datetime.min.time(), UTC),
    )


# --- idle GPUs ----------------------------------------------------------------------------------------------


def idle_candidates(session: Session, now: datetime, window_seconds: int, max_gap_seconds: int) -> list[Candidate]:
    """One candidate per job holding GPUs in an idle episode still open at ``now`` (episode end at or after
    ``now`` − ``max_gap_seconds``): its GPUs, cost of the open episodes so far, owner. Episodes on GPUs whose model
    has no price are not counted in the cost as 0: the figures name their models (``unpriced_models``, ``cost``
    null when no episode is priced) and the summary says they are unpriced and how to fix it. The probable reason
    (:func:`probable_reason`) is a field and the summary's last sentence, and ``reason``/``evidence`` figures."""
    since = now - timedelta(seconds=max_gap_seconds)
    by_job: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for episode in list_episodes(session, since, now + timedelta(seconds=1)):
        if episode.end >= since:
            by_job[episode.job_id, episode.team].append(episode)
    found = []
    for (job_id, team), episodes in sorted(by_job.items()):
        gpus = sorted({(e.node, e.gpu_index) for e in episodes})
        nodes = sorted({node for node, _ in gpus})
        currency = episodes[0].currency
        priced = [e.cost for e in episodes if e.cost is not None]
        cost = sum(priced, Decimal(0)) if priced else None
        fixes = {e.model: e.unpriced_fix for e in episodes if e.cost is None}
        unpriced_gpus = sorted({(e.node, e.gpu_index) for e in episodes if e.cost is None})
        since_start = min(e.start for e in episodes)
        user = episodes[0].user
        held = any(e.memory_held for e in episodes)
        gpu_text = "; ".join(f"{node}: {', '.join(str(i) for n, i in gpus if n == node)}" for node in nodes)
        idle_for = duration_text((now - since_start).total_seconds())
        unpriced = f"{len(unpriced_gpus)} unpriced GPU{'s' if len(unpriced_gpus) != 1 else ''}"
        if cost is None:
            costing, cost_text = "their cost unknown (unpriced)", "unpriced"
        elif fixes:
            costing = f"costing {money(cost, currency)} so far, not counting {unpriced}"
            cost_text = f"{money(cost, currency)} + {unpriced}"
        else:
            costing, cost_text = f"costing {money(cost, currency)} so far", money(cost, currency)
        unpriced_text = "No price for " + "; ".join(f"{model!r}: {fix}" for model, fix in sorted(fixes.items()))
        verdict = probable_reason(episodes)
        summary = (
            f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''} of job {job_id} (user {user}, team {team}) have been "
            f"idle for {idle_for}, {costing}"
            + (" while holding GPU memory." if held else ".")
            + (f" {unpriced_text}." if fixes else "")
            + ("" if verdict is None else f" {verdict.sentence()[0].upper()}{verdict.sentence()[1:]}.")
        )
        fields = [
            ["Team", team],
            ["Job", job_id],
            ["User", user],
            ["GPUs", f"{len(gpus)} ({gpu_text})"],
            ["Idle since", f"{since_start:%Y-%m-%d %H:%M} UTC ({idle_for})"],
            ["Cost so far", cost_text],
            ["Memory held", "yes" if held else "no"],
        ]
        if verdict is not None:
            fields.append(["Probable reason", f"{verdict.title}: {verdict.evidence}"])
        if fixes:
            fields.append(["Unpriced", unpriced_text])
        found.append(
            Candidate(
                rule="idle-gpu",
                labels={**_team_label(team), "job": job_id, "user": user},
                annotations={
                    "title": f"Idle GPUs: job {job_id}, team {team}",
                    "name": f"job {job_id}",
                    "summary": summary,
                    "fields": fields,
                    "page": "idle",
                },
                figures={
                    "gpus": [[n, i] for n, i in gpus],
                    "nodes": nodes,
                    "cost": None if cost is None else str(cost),
                    "currency": currency,
                    "unpriced_models": sorted(fixes),
                    "idle_since": since_start.isoformat(),
                    "memory_held": held,
                    "reason": None if verdict is None else verdict.reason,
                    "evidence": None if verdict is None else verdict.evidence,
                },
                starts_at=since_start + timedelta(seconds=window_seconds),
            )
        )
    return found


def probable_reason(episodes: Sequence[EpisodeView]) -> Verdict | None:
    """The reason of the episodes (one job's) that covers the most GPU-time, the rules' precedence breaking ties, with
    the evidence of its longest episode; None when none has been judged."""
    hours: dict[str, float] = defaultdict(float)
    longest: dict[str, tuple[float, Verdict]] = {}
    for episode in episodes:
        verdict = episode.verdict
        if verdict is None:
            continue
        hours[verdict.reason] += episode.hours
        if episode.hours > longest.get(verdict.reason, (-1.0, verdict))[0]:
            longest[verdict.reason] = (episode.hours, verdict)
    if not hours:
        return None
    order = [rule.reason for rule in RULES]
    return longest[max(hours, key=lambda key: (hours[key], -order.index(key)))][1]


# --- throttling ---------------------------------------------------------------------------------------------

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
                labels={**_team_label(team), "node": node, "gpu": str(index), "job": job_id},
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


# --- collector silent, GPU lost -----------------------------------------------------------------------------

_NEWEST_READINGS = text("""
SELECT g.id AS gpu_id, n.hostname AS node, g.gpu_index AS gpu_index, g.uuid AS uuid,
       (SELECT MAX(s.ts) FROM gpu_samples s WHERE s.gpu_id = g.id AND s.ts >= :since AND s.ts <= :now) AS last_ts
FROM gpus g JOIN nodes n ON n.id = g.node_id
WHERE g.uuid IS NOT NULL
""")


def silence_candidates(
    session: Session, now: datetime, collector_interval_seconds: float, silent: SilenceConfig, lost: SilenceConfig
) -> tuple[list[Candidate], list[Candidate]]:
    """(collector-silent candidates, one per silent node; gpu-lost candidates, one per GPU without readings while
    its node reports). Only nodes and GPUs that have reported (a UUID) are judged; the newest reading is
    looked for within the last 24 hours."""
    rows = session.execute(_NEWEST_READINGS, {"since": to_epoch(now - SILENCE_LOOKBACK), "now": to_epoch(now)}).all()
    per_node: dict[str, list[Any]] = defaultdict(list)
    for row in rows:
        per_node[row.node].append(row)
    silent_after = silent.intervals * collector_interval_seconds
    lost_after = lost.intervals * collector_interval_seconds
    nodes, gpus = [], []
    for node, members in sorted(per_node.items()):
        readings = [int(m.last_ts) for m in members if m.last_ts is not None]
        newest = max(readings) if readings else None
        if newest is None or to_epoch(now) - newest >= silent_after:
            nodes.append(_silent_node(node, len(members), newest, now, silent_after))
            continue
        for member in sorted(members, key=lambda m: m.gpu_index):
            last = None if member.last_ts is None else int(member.last_ts)
            if last is None or to_epoch(now) - last >= lost_after:
                gpus.append(_lost_gpu(node, member.gpu_index, member.uuid, last, newest, now, lost_after))
    return nodes, gpus


def _since_text(last: int | None, now: datetime) -> str:
    if last is None:
        return "more than 24 h"
    return f"{duration_text(to_epoch(now) - last)} (last reading {from_epoch(last):%Y-%m-%d %H:%M:%S} UTC)"


def _silent_node(node: str, gpus: int, newest: int | None, now: datetime, after: float) -> Candidate:
    silent_for = _since_text(newest, now)
    summary = (
        f"No GPU reading from {node} for {silent_for}: its collector or the network is down, and its {gpus} GPUs' "
        "costs are billed without telemetry. Idle and throttling alerts of this node are held back meanwhile."
    )
    return Candidate(
        rule="collector-silent",
        labels={"node": node},
        annotations={
            "title": f"Collector silent: {node}",
            "name": node,
            "summary": summary,
            "fields": [["Node", node], ["GPUs", str(gpus)], ["Silent for", silent_for]],
            "page": "quality",
        },
        figures={"last_reading": None if newest is None else from_epoch(newest).isoformat(), "gpus": gpus},
        starts_at=now if newest is None else from_epoch(int(newest + after)),
    )


def _lost_gpu(
    node: str, index: int, uuid: str, last: int | None, node_last: int, now: datetime, after: float
) -> Candidate:
    silent_for = _since_text(last, now)
    summary = (
        f"GPU {index} ({uuid}) on {node} has sent no reading for {silent_for} while the node's other GPUs report: "
        "the GPU may have fallen off the bus or its driver stopped answering."
    )
    return Candidate(
        rule="gpu-lost",
        labels={"node": node, "gpu": str(index)},
        annotations={
            "title": f"GPU lost: {node} GPU {index}",
            "name": f"{node} GPU {index}",
            "summary": summary,
            "fields": [["Node", node], ["GPU", str(index)], ["UUID", uuid], ["Silent for", silent_for]],
            "page": "gpus",
        },
        figures={
            "uuid": uuid,
            "last_reading": None if last is None else from_epoch(last).isoformat(),
            "node_last_reading": from_epoch(node_last).isoformat(),
        },
        starts_at=now if last is None else from_epoch(int(last + after)),
    )


# --- data quality -------------------------------------------------------------------------------------------


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
