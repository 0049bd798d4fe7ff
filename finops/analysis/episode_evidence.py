"""What an idle episode is judged on: the readings of its own span, not of the whole run it was clipped from.

An episode is an idle run of its GPU's readings (:mod:`finops.analysis.idle_runs`) clipped to an allocation, from the
allocation's start + the grace to the earlier of the run's end and the allocation's (:func:`finops.analysis.idle.
_held_runs`). The run may have begun before the allocation (the GPU idle already, or the job before idle to its end)
or go on after it, for the next job: its memory, reading counts and clocks-event reasons are then partly other jobs'.
An episode's are those of the readings with a utilisation in [start, end), all of them the run's: the run's sums less
those of its readings clipped off, before its start and, when the allocation ends first, from its end on. Those lie
within what the re-judging read around its period (a run starts no earlier than its read), so they cost a few
minutes of readings per episode, not the episode's days. Counts and clock sums subtract; the most memory does not:
where the clipped-off readings hold the run's most, the episode's is read over its own span. A run's readings are
its GPU's readings at or below its threshold from its start up to its covered end, that one included: a run with no
reading after it covers until its last reading (:meth:`finops.analysis.idle_runs.RunPiece.covered_until`), and the
reading that ends any other lies above the threshold or past the covered end.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, text

from finops.analysis.idle_runs import CLOCK_COLUMNS, NO_CLOCK_COLUMNS, RUN_SUMS, IdleRun
from finops.db.dialect import json_rows

_RANGE_COLUMNS = {"i": "integer", "gpu_id": "integer", "lo": "bigint", "hi": "bigint", "t": "double precision"}
# Per range i, the sums of the GPU's readings at or below the threshold t in [lo, hi], as the run statements make them
# (RUN_SUMS), read by the (gpu_id, ts) key (PostgreSQL: LATERAL behind OFFSET 0, not flattened into a scan of the day
# partitions).
_READ = {
    "postgresql": "{ranges} CROSS JOIN LATERAL (SELECT x.gpu_id, x.ts, x.memory_used_bytes{clock_columns} "
    "FROM {table} x WHERE x.gpu_id = g.gpu_id AND x.ts >= g.lo AND x.ts <= g.hi AND x.utilization_ratio <= g.t "
    "OFFSET 0) r",
    "sqlite": "{ranges} JOIN {table} r ON r.gpu_id = g.gpu_id AND r.ts >= g.lo AND r.ts <= g.hi "
    "AND r.utilization_ratio <= g.t",
}
_RANGE_SUMS = f"""SELECT i, {RUN_SUMS} FROM (SELECT g.i, r.gpu_id * 4294967296 + r.ts AS k, r.memory_used_bytes AS mem,
    {{clocks}} FROM {{read}}) readings GROUP BY i"""  # noqa: S608 - constant fragments only


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
    its whole run takes the run's; the others cost one statement for all of their clipped-off readings, and one more
    for the most memory of those whose clipped-off readings hold their run's."""
    clipped = [i for i, (run, _, lo, hi) in enumerate(episodes) if lo > run.first_ts or hi < run.covered_until]
    outside = []
    for i in clipped:
        run, threshold, lo, hi = episodes[i]
        if lo > run.first_ts:
            outside.append({"i": i, "gpu_id": run.gpu_id, "lo": run.first_ts, "hi": lo - 1, "t": threshold})
        if hi < run.covered_until:
            outside.append({"i": i, "gpu_id": run.gpu_id, "lo": hi, "hi": run.covered_until, "t": threshold})
    off = _range_sums(connection, outside, table, clocks)
    own = [
        {"i": i, "gpu_id": run.gpu_id, "lo": lo, "hi": hi if hi == run.covered_until else hi - 1, "t": threshold}
        for i in clipped
        for run, threshold, lo, hi in [episodes[i]]
        if i in off and off[i][1] >= run.max_mem > 0
    ]
    most_memory = {i: sums[1] for i, sums in _range_sums(connection, own, table, clocks).items()}
    found = []
    for i, (run, _, _, _) in enumerate(episodes):
        readings, _, thermal, power, throttled, sm_sum, sm_n = off.get(i, (0, 0.0, 0, 0, 0, 0.0, 0))
        left = run.sm_n - sm_n
        found.append(
            Evidence(
                max_mem=most_memory.get(i, run.max_mem),
                readings=run.readings - readings,
                thermal_readings=run.thermal_readings - thermal,
                power_readings=run.power_readings - power,
                throttled_readings=run.throttled_readings - throttled,
                throttled_sm_clock=(run.sm_sum - sm_sum) / left if left else None,
            )
        )
    return found


def _range_sums(
    connection: Connection, ranges: list[dict[str, Any]], table: str, clocks: bool
) -> dict[int, tuple[int, float, int, int, int, float, int]]:
    """Per range index ``i`` (the readings of several ranges with the same index summed together; each range's
    ``lo`` and ``hi`` included): readings, most memory, thermal, power and throttled readings, SM clock sum and
    count; an index without a reading is left out."""
    if not ranges:
        return {}
    dialect = connection.dialect.name
    read = _READ[dialect].format(
        ranges=json_rows(dialect, "ranges", "g", _RANGE_COLUMNS),
        table=table,
        clock_columns=", x.clocks_event_reasons, x.sm_clock_hertz" if clocks else "",
    )
    columns = CLOCK_COLUMNS if clocks else NO_CLOCK_COLUMNS
    statement = text(_RANGE_SUMS.replace("{clocks}", columns).replace("{read}", read))
    sums: dict[int, tuple[int, float, int, int, int, float, int]] = {}
    for row in connection.execute(statement, {"ranges": json.dumps(ranges)}):
        values: list[Any] = list(row)
        i, _, _, readings, max_mem, thermal, power, throttled, sm_sum, sm_n = values
        sums[int(i)] = (int(readings), float(max_mem or 0.0), int(thermal or 0), int(power or 0),
                        int(throttled or 0), float(sm_sum or 0.0), int(sm_n or 0))  # fmt: skip
    return sums
