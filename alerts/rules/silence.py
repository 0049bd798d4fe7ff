"""The ``collector-silent`` and ``gpu-lost`` rules: nodes and GPUs whose readings stopped."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from alerts.config import SilenceConfig
from alerts.rules.candidate import Candidate, duration_text
from finops.timeutil import from_epoch, to_epoch

SILENCE_LOOKBACK = timedelta(hours=24)
"""Readings older than this are not searched for: a node silent longer is silent since "more than a day"."""

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
