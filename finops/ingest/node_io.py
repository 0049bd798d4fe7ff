"""A node's fabric and storage rates per hour (``node_io_hours``), from the ``node_io`` entries of its collector's
batches (:class:`collector.contract.wire.NodeIo`) or, in the TSDB mode, from the collectors' counters in the TSDB
(:meth:`finops.ingest.tsdb_source.TsdbTelemetry.store_node_rates`, :func:`replace_hours`), and how fast a node
moved data over a period.

Entries are folded into their node's hour and kind as they arrive: one more reading, its rate added to the sum and
compared with the maximum, the hour's newest instant moved on. A collector sends its cycles in order, its spool oldest
first, so an entry at or before the newest instant stored for its node, hour and kind has been stored already (a batch
sent again after the collector missed the answer) and is not added twice. An entry arriving out of order (two
collectors speaking for one node) is dropped the same way.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import TextClause, bindparam, delete, insert, select, text
from sqlalchemy.orm import Session

from collector.contract.node_io import NODE_IO_COUNTERS
from collector.contract.wire import NodeIo
from finops.db.dialect import larger_of_two
from finops.db.models import Node, NodeIoHour
from finops.timeutil import HOUR, from_epoch, to_epoch

_FOLD = """
WITH entry (hour, kind, ts, rate) AS (VALUES {values}),
node AS (SELECT id FROM nodes WHERE hostname = :node),
fresh AS (
    SELECT node.id AS node_id, entry.hour, entry.kind, entry.ts, entry.rate
    FROM entry CROSS JOIN node
    LEFT JOIN node_io_hours stored
        ON stored.node_id = node.id AND stored.hour = entry.hour AND stored.kind = entry.kind
    WHERE stored.last_ts IS NULL OR entry.ts > stored.last_ts
)
INSERT INTO node_io_hours (node_id, hour, kind, readings, rate_sum, rate_max, last_ts)
SELECT node_id, hour, kind, COUNT(*), SUM(rate), MAX(rate), MAX(ts) FROM fresh WHERE true
GROUP BY node_id, hour, kind
ON CONFLICT (node_id, hour, kind) DO UPDATE SET
    readings = node_io_hours.readings + excluded.readings,
    rate_sum = node_io_hours.rate_sum + excluded.rate_sum,
    rate_max = {larger}(node_io_hours.rate_max, excluded.rate_max),
    last_ts = excluded.last_ts
WHERE node_io_hours.last_ts < excluded.last_ts
"""
"""Folds entries (``:h<i>``, ``:k<i>``, ``:t<i>``, ``:r<i>``: hour, kind, instant, rate) of node ``:node`` into its
hours in one statement: those at or before their hour's newest stored instant are left out, the others summed per
hour and kind and added (``WHERE true`` lets SQLite tell the upsert from a join)."""


FOLDED_PER_STATEMENT = 8000
"""Rates :data:`_FOLD` takes at once: four bind parameters each, within SQLite's default bound of 32,766 (and
PostgreSQL's 65,535). A one-GPU node's backlog of 10,000 cycles carries 10,000 entries, up to eight rates each."""


def store_node_io(session: Session, node: str, entries: Sequence[NodeIo]) -> int:
    """Fold ``entries`` of node ``node`` (a hostname) into its hours, in the caller's transaction, in statements of
    at most :data:`FOLDED_PER_STATEMENT` rates (:data:`_FOLD`), oldest first; returns how many (hour, kind) rows they
    wrote (a row written by two statements counts twice). A node the database does not know stores nothing (its
    GPUs register it)."""
    rates = [(e.ts - e.ts % HOUR, kind, e.ts, rate) for e in entries for kind, rate in e.rates().items()]
    folded = sorted(rates, key=lambda item: item[2])
    written = 0
    larger = larger_of_two(session.connection())
    for start in range(0, len(folded), FOLDED_PER_STATEMENT):
        part = folded[start : start + FOLDED_PER_STATEMENT]
        parameters: dict[str, Any] = {"node": node}
        for i, (hour, kind, ts, rate) in enumerate(part):
            parameters.update({f"h{i}": hour, f"k{i}": kind, f"t{i}": ts, f"r{i}": rate})
        values = ", ".join(f"(:h{i}, :k{i}, :t{i}, :r{i})" for i in range(len(part)))
        statement = _FOLD.format(values=values, larger=larger)
        written += int(getattr(session.execute(text(statement), parameters), "rowcount", 0) or 0)
    return written


@dataclass(frozen=True, slots=True)
class HourRate:
    """One node's rate of one kind over one UTC hour (epoch start), bytes per second: ``readings`` instants, their
    ``mean`` and ``peak``."""

    node: str
    hour: int
    kind: str
    readings: int
    mean: float
    peak: float


def replace_hours(session: Session, hours: Iterable[int], rates: Iterable[HourRate]) -> int:
    """Replace the ``node_io_hours`` rows of ``hours`` (epoch starts) by ``rates`` (those of nodes the database does
    not know, or with no reading, left out), in the caller's transaction; returns the rows written."""
    wanted = sorted(set(hours))
    if not wanted:
        return 0
    session.execute(delete(NodeIoHour).where(NodeIoHour.hour.in_([from_epoch(h) for h in wanted])))
    nodes = {name: node_id for node_id, name in session.execute(select(Node.id, Node.hostname))}
    rows = [
        {
            "node_id": nodes[rate.node],
            "hour": from_epoch(rate.hour),
            "kind": rate.kind,
            "readings": rate.readings,
            "rate_sum": rate.mean * rate.readings,
            "rate_max": rate.peak,
            "last_ts": from_epoch(rate.hour + HOUR - 1),
        }
        for rate in rates
        if rate.node in nodes and rate.readings > 0
    ]
    if rows:
        session.execute(insert(NodeIoHour), rows)
    return len(rows)


@dataclass(frozen=True, slots=True)
class NodeRate:
    """How fast a node moved data of one kind over a period: ``mean`` bytes per second (each hour's mean weighted by
    the seconds of the period in it) and ``peak``, the largest single reading of those hours; ``seconds`` of the
    period that had readings of the kind."""

    mean: float
    peak: float
    seconds: int


_KINDS = tuple(NODE_IO_COUNTERS)


def _node_hours() -> TextClause:
    """Per node of ``:nodes`` and hour in [``:first``, ``:last``) (epoch seconds), each kind's mean rate
    (``rate_sum / readings``) and peak, NULL for a kind without readings: one row per node-hour, the kinds in
    :data:`_KINDS`' order."""
    columns = ", ".join(
        f"MAX(CASE WHEN kind = '{kind}' THEN rate_sum / readings END), MAX(CASE WHEN kind = '{kind}' THEN rate_max END)"
        for kind in _KINDS
    )
    return text(
        f"SELECT node_id, hour, {columns} FROM node_io_hours "  # noqa: S608 - the constant kinds
        "WHERE node_id IN :nodes AND hour >= :first AND hour < :last GROUP BY node_id, hour"
    ).bindparams(bindparam("nodes", expanding=True))


_NODE_HOURS = _node_hours()


def node_rates(
    session: Session, periods: Iterable[tuple[int, datetime, datetime]]
) -> dict[tuple[int, datetime, datetime], dict[str, NodeRate]]:
    """Per (``nodes.id``, start, end) of ``periods``: kind → :class:`NodeRate` over [start, end) from the node's
    hours (a period's part in an hour weighs that hour's mean); a kind without readings in the period is absent.
    One query for all the periods' nodes and hours, a row per node-hour."""
    wanted = list(dict.fromkeys(periods))
    if not wanted:
        return {}
    first = min(to_epoch(start) for _, start, _ in wanted)
    last = max(to_epoch(end) for _, _, end in wanted)
    nodes = sorted({node for node, _, _ in wanted})
    hours: dict[tuple[int, int], list[tuple[str, float, float]]] = {}
    for node_id, hour, *rates in session.execute(
        _NODE_HOURS, {"nodes": nodes, "first": first - first % HOUR, "last": last}
    ).all():
        kinds = zip(_KINDS, rates[::2], rates[1::2], strict=True)
        hours[node_id, hour] = [(kind, mean, peak) for kind, mean, peak in kinds if mean is not None]
    result: dict[tuple[int, datetime, datetime], dict[str, NodeRate]] = {}
    for node_id, start, end in wanted:
        lo, hi = to_epoch(start), to_epoch(end)
        weighted: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
        for hour in range(lo - lo % HOUR, hi, HOUR):
            overlap = min(hi, hour + HOUR) - max(lo, hour)
            for kind, mean, peak in hours.get((node_id, hour), ()):
                sums = weighted[kind]
                sums[0] += mean * overlap
                sums[1] += overlap
                sums[2] = max(sums[2], peak)
        result[node_id, start, end] = {
            kind: NodeRate(total / seconds, peak, int(seconds)) for kind, (total, seconds, peak) in weighted.items()
        }
    return result
