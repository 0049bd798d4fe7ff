"""What an idle episode is judged on: the readings of its own span, not of the whole run it was clipped from.

An episode is an idle run of its GPU's readings (:mod:`finops.analysis.idle_runs`) clipped to an allocation, from the
allocation's start + the grace to the earlier of the run's end and the allocation's (:func:`finops.analysis.idle.
_held_runs`). The run may have begun before the allocation (the GPU idle already, or the job before idle to its end)
or go on after it, for the next job: its memory, reading counts and clocks-event reasons are then partly other jobs'.
An episode's are those of the run's readings from its start on and, when the allocation ends first, before its end
(the run's readings: its GPU's at or below its threshold from its first reading to its last, ``IdleRun.last_ts``).

Each clipped episode is read the cheaper way, by the seconds each covers: its own readings, or those clipped off it
(before its start, and from its end on), whose sums are taken off the run's; one statement for all of them. Counts
and clock sums subtract; the most memory does not: where the clipped-off readings hold the run's most, the episode
holds it too when one of its readings does (a probe in time order that stops at the first: a process holding the same
memory all along), else its own readings are read for it.

What that costs each re-judging: the readings clipped off an episode start no earlier than the read that found its
run, so mostly the grace's readings and those of the hour the read began in. Two cases read more, each re-judging
while the episode lasts: an episode holding less memory than the readings clipped off it (the job before held more
idle, or the next job does) is read twice over its whole span (the probe, then its most memory); and on a GPU shared
by time-slicing, where another job's stored episode makes the read begin at that one's start, an episode reads up to
half its run. Carrying each episode's sums from one cycle to the next (:mod:`finops.analysis.idle_carry`) would end
both.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Connection, text

from finops.analysis.idle_pieces import IdleRun
from finops.analysis.idle_runs import CLOCK_COLUMNS, NO_CLOCK_COLUMNS, RUN_SUMS, readings_in_ranges
from finops.db.dialect import NO_PARALLEL_WORKERS, json_rows, transaction_settings

_RANGE_COLUMNS = {"i": "integer", "gpu_id": "integer", "lo": "bigint", "hi": "bigint", "t": "double precision"}
# Per range i, the sums of the GPU's readings at or below the threshold t in [lo, hi], as the run statements make them
# (RUN_SUMS), read by key (finops.analysis.idle_runs.readings_in_ranges).
_RANGE_SUMS = f"""SELECT i, {RUN_SUMS} FROM (SELECT g.i, r.gpu_id * 4294967296 + r.ts AS k, r.memory_used_bytes AS mem,
    {{clocks}} FROM {{read}} WHERE r.utilization_ratio <= g.t) readings GROUP BY i"""  # noqa: S608 - constant fragments only


@dataclass(frozen=True, slots=True)
class Evidence:
    """The readings of an episode's span: the most memory in use (bytes; 0 without a value), how many, and of them
    with a thermal, a power, either clocks-event reason, and the mean SM clock (Hz) of those with either (None:
    none has a clock)."""

    max_mem: float
    readings: int
    thermal_readings: int
    power_readings: int
    throttled_readings: int
    throttled_sm_clock: float | None


def episode_evidence(
    connection: Connection, episodes: Sequence[tuple[IdleRun, float, int, int]], table: str, clocks: bool
) -> list[Evidence]:
    """The evidence of each of ``episodes`` (its run, the run's idle threshold ratio, the episode's start and end,
    epoch seconds), in order (module docstring), from ``table`` (``gpu_samples``, or a table of its columns keyed by
    ``(gpu_id, ts)``; ``clocks``: whether it has ``clocks_event_reasons`` and ``sm_clock_hertz``). An episode that is
    its whole run takes the run's; the others cost one statement for all, and at most two more for the most memory of
    those whose clipped-off readings hold their run's (what each reads: module docstring). Statements without parallel
    workers or JIT compilation (PostgreSQL)."""
    ranges: list[dict[str, Any]] = []
    direct: set[int] = set()
    subtracted: dict[int, dict[str, Any]] = {}
    for i, (run, threshold, lo, hi) in enumerate(episodes):
        last = run.last_ts if hi >= run.covered_until else min(hi - 1, run.last_ts)
        if lo <= run.first_ts and last >= run.last_ts:
            continue  # the whole run
        outside = [(run.first_ts, lo - 1)] if lo > run.first_ts else []
        if last < run.last_ts:
            outside.append((last + 1, run.last_ts))
        own = {"i": i, "gpu_id": run.gpu_id, "lo": lo, "hi": last, "t": threshold}
        if last - lo + 1 <= sum(b - a + 1 for a, b in outside):
            direct.add(i)
            ranges.append(own)
        else:
            subtracted[i] = own
            ranges += [{"i": -1 - i, "gpu_id": run.gpu_id, "lo": a, "hi": b, "t": threshold} for a, b in outside]
    if not ranges:
        return [_less(run, _NOTHING) for run, _, _, _ in episodes]
    with transaction_settings(connection, _PG_SETTINGS):
        sums = _range_sums(connection, ranges, table, clocks)
        # The most memory of an episode whose clipped-off readings hold its run's: the run's when one of its own does.
        unsure = {i: own | {"m": episodes[i][0].max_mem} for i, own in subtracted.items()
                  if 0 < episodes[i][0].max_mem <= sums.get(-1 - i, _NOTHING)[1]}  # fmt: skip
        holding = _holding(connection, list(unsure.values()), table)
        lower = [r for i, r in unsure.items() if i not in holding]
        most = {i: read[1] for i, read in _range_sums(connection, lower, table, clocks).items()}
    found = []
    for i, (run, _, _, _) in enumerate(episodes):
        if i in direct:
            found.append(_own(sums.get(i, _NOTHING)))
        elif i in unsure and i not in holding:
            found.append(replace(_less(run, sums.get(-1 - i, _NOTHING)), max_mem=most.get(i, 0.0)))
        else:
            found.append(_less(run, sums.get(-1 - i, _NOTHING)))
    return found


_Sums = tuple[int, float, int, int, int, float, int]
"""Readings, most memory, thermal, power and throttled readings, SM clock sum and count."""
_NOTHING: _Sums = (0, 0.0, 0, 0, 0, 0.0, 0)
_PG_SETTINGS = {"jit": "off", **NO_PARALLEL_WORKERS}


def _own(sums: _Sums) -> Evidence:
    """An episode's evidence from the sums of its own readings."""
    readings, max_mem, thermal, power, throttled, sm_sum, sm_n = sums
    return Evidence(max_mem, readings, thermal, power, throttled, sm_sum / sm_n if sm_n else None)


def _less(run: IdleRun, outside: _Sums) -> Evidence:
    """An episode's evidence as its run's less ``outside``, the sums of the readings clipped off it (nothing: the whole
    run), with the run's most memory."""
    readings, _, thermal, power, throttled, sm_sum, sm_n = outside
    left = run.sm_n - sm_n
    return Evidence(
        max_mem=run.max_mem,
        readings=run.readings - readings,
        thermal_readings=run.thermal_readings - thermal,
        power_readings=run.power_readings - power,
        throttled_readings=run.throttled_readings - throttled,
        throttled_sm_clock=(run.sm_sum - sm_sum) / left if left else None,
    )


def _holding(connection: Connection, ranges: list[dict[str, Any]], table: str) -> set[int]:
    """The indexes ``i`` of ``ranges`` with a reading at or below the threshold ``t`` in [lo, hi] using at least ``m``
    bytes of memory: per range the first such reading, looked up in time order by the ``(gpu_id, ts)`` key (``ORDER
    BY ts LIMIT 1``: an ordered index probe that stops there, which PostgreSQL plans for an ``EXISTS`` as a bitmap of
    the whole range, or a join)."""
    if not ranges:
        return set()
    dialect = connection.dialect.name
    columns = _RANGE_COLUMNS | {"m": "double precision"}
    statement = text(
        f"SELECT g.i FROM {json_rows(dialect, 'ranges', 'g', columns)} WHERE (SELECT x.ts FROM {table} x "  # noqa: S608 - constants and the caller's table name
        "WHERE x.gpu_id = g.gpu_id AND x.ts >= g.lo AND x.ts <= g.hi AND x.utilization_ratio <= g.t "
        "AND x.memory_used_bytes >= g.m ORDER BY x.ts LIMIT 1) IS NOT NULL"
    )
    return {int(i) for (i,) in connection.execute(statement, {"ranges": json.dumps(ranges)})}


def _range_sums(connection: Connection, ranges: list[dict[str, Any]], table: str, clocks: bool) -> dict[int, _Sums]:
    """Per range index ``i`` (the readings of several ranges with the same index summed together; each range's
    ``lo`` and ``hi`` included): the sums of :data:`_Sums`; an index without a reading is left out."""
    if not ranges:
        return {}
    read = readings_in_ranges(connection.dialect.name, table, clocks, _RANGE_COLUMNS)
    columns = CLOCK_COLUMNS if clocks else NO_CLOCK_COLUMNS
    statement = text(_RANGE_SUMS.replace("{clocks}", columns).replace("{read}", read))
    sums: dict[int, _Sums] = {}
    for row in connection.execute(statement, {"ranges": json.dumps(ranges)}):
        i, _, _, readings, max_mem, thermal, power, throttled, sm_sum, sm_n = row
        sums[int(i)] = (int(readings), float(max_mem or 0.0), int(thermal or 0), int(power or 0),
                        int(throttled or 0), float(sm_sum or 0.0), int(sm_n or 0))  # fmt: skip
    return sums
