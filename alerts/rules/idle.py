"""The ``idle-gpu`` rule: open idle episodes as one candidate per job, with cost so far and probable waste reason."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy.orm import Session

from alerts.rules.candidate import Candidate, duration_text, money, team_label
from finops.analysis.idle import EpisodeView, list_episodes
from finops.analysis.waste import RULES, Verdict


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
                labels={**team_label(team), "job": job_id, "user": user},
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
