"""Cost reports as printed: JSON-ready dicts, CSV and a fixed-width text table.

The rows of :func:`finops.analysis.report.cost_report`, money in cents by
:func:`finops.ledger.costmodel.round_preserving_total` column by column (the rows add up to the rounded total), GPU
time in hours, the hardware activity as ratios and percentages, and ``not measured`` / ``unpriced`` where nothing
measured or priced it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal

from finops.analysis.report import (
    ACTIVITY_FIELDS,
    MONEY_FIELDS,
    NOT_MEASURED,
    GroupBy,
    ReportRow,
    UnpricedModel,
    merged_row,
    reported_hours,
)
from finops.csv_cells import dict_rows_csv
from finops.ledger.costmodel import JOULES_PER_KWH, quantize, round_preserving_total


def _ratio(value: float | None) -> float | None:
    """A ratio as reported: 6 decimals, None kept."""
    return None if value is None else round(value, 6)


def printed_cents(rows: Sequence[ReportRow], field: str) -> list[Decimal]:
    """Money column ``field`` (one of :data:`MONEY_FIELDS`) of ``rows``, in row order, in the cents the report
    prints: :func:`finops.ledger.costmodel.round_preserving_total` of the exact amounts, so they add up to the
    rounded total. A row's cents can thus differ by one from its own amount rounded alone; whatever shows a group's
    cost beside a report (the budgets' month-to-date spend) takes it from here to agree to the cent."""
    return round_preserving_total([getattr(row, field) for row in rows])


def printed_sm_active_cents(rows: Sequence[ReportRow]) -> list[Decimal | None]:
    """The SM-active cost of ``rows`` in row order, in cents by
    :func:`finops.ledger.costmodel.round_preserving_total` over the rows that have one (they add up to their rounded
    total); None for a row without one (not measured, or unpriced)."""
    known = [i for i, row in enumerate(rows) if row.sm_active_cost is not None]
    rounded = round_preserving_total([rows[i].sm_active_cost or Decimal(0) for i in known])
    cents: list[Decimal | None] = [None] * len(rows)
    for i, amount in zip(known, rounded, strict=True):
        cents[i] = amount
    return cents


def report_dicts(rows: Sequence[ReportRow], by: GroupBy = "team") -> list[dict[str, object]]:
    """JSON-ready rows: ``{team|job, allocated_gpu_hours, used_gpu_hours, idle_gpu_hours, allocated_cost,
    used_cost, idle_cost, energy_kwh, energy_cost, currency}`` plus ``allocated_gpu_seconds``,
    ``unmetered_gpu_hours``, ``unmetered_share`` (:attr:`ReportRow.unmetered_share`, 6 decimals, None for
    ``__unallocated__``) and ``unpriced_gpu_hours``; by job also ``name``, ``team``, ``user``, ``start``, ``end``
    (ISO 8601 UTC, null while running), ``state`` (:class:`JobFacts`) and ``gpus``; money as decimal strings in
    cents that add up to the rounded totals. The money of the GPU-hours with a price only; a row whose GPU-hours
    are all unpriced has allocated, used and idle cost None (unknown, not 0).

    Then the hardware activity: ``sm_active_ratio``, ``tensor_active_ratio``, ``dram_active_ratio``
    (:meth:`ReportRow.activity_ratio`, 6 decimals), ``sm_active_cost`` (cents, :func:`printed_sm_active_cents`) and
    ``profiled_share`` (:attr:`ReportRow.profiled_share`, 6 decimals); each None where nothing measured it."""
    rounded = {name: printed_cents(rows, name) for name in MONEY_FIELDS}
    sm_active_cents = printed_sm_active_cents(rows)
    result = []
    for i, row in enumerate(rows):
        item: dict[str, object] = {by: row.key}
        if by == "job":
            job = row.job
            item.update(
                name=job.name if job else None,
                team=row.team,
                user=row.user,
                start=job.start.isoformat() if job and job.start else None,
                end=job.end.isoformat() if job and job.end else None,
                state=job.state if job else None,
                gpus=job.gpus if job else None,
            )
        item.update(
            allocated_gpu_hours=reported_hours(row.allocated_gpu_seconds),
            allocated_gpu_seconds=row.allocated_gpu_seconds,
            used_gpu_hours=reported_hours(row.used_gpu_seconds),
            idle_gpu_hours=reported_hours(row.idle_gpu_seconds),
            unmetered_gpu_hours=reported_hours(row.unmetered_gpu_seconds),
            unmetered_share=_ratio(row.unmetered_share),
            unpriced_gpu_hours=reported_hours(row.unpriced_gpu_seconds),
            allocated_cost=None if row.unpriced_only else str(rounded["allocated_cost"][i]),
            used_cost=None if row.unpriced_only else str(rounded["used_cost"][i]),
            idle_cost=None if row.unpriced_only else str(rounded["idle_cost"][i]),
            energy_kwh=float(quantize(Decimal(repr(row.energy_joules)) / JOULES_PER_KWH, Decimal("0.001"))),
            energy_cost=str(rounded["energy_cost"][i]),
            currency=row.currency,
            **{field: _ratio(row.activity_ratio(field)) for field in ACTIVITY_FIELDS},
            sm_active_cost=None if (cents := sm_active_cents[i]) is None else str(cents),
            profiled_share=_ratio(row.profiled_share),
        )
        result.append(item)
    return result


def dicts_csv(dicts: Sequence[Mapping[str, object]]) -> str:
    """``dicts`` (rows with the same keys, in order) as CSV text (RFC 4180, ``\\r\\n`` line ends, text cells escaped
    against formula injection: :mod:`finops.csv_cells`) with a header line of the first row's keys; empty text
    without rows."""
    return dict_rows_csv(list(dicts[0]), dicts, end="\r\n") if dicts else ""


def report_csv(rows: Sequence[ReportRow], by: GroupBy = "team") -> str:
    """The rows of :func:`report_dicts` as CSV text with a header line."""
    return dicts_csv(report_dicts(rows, by))


def report_table(rows: Sequence[ReportRow], by: GroupBy = "team", unpriced: Sequence[UnpricedModel] = ()) -> str:
    """The rows as a fixed-width text table with a total line. ``unmetered GPU-h``: the held GPU-hours without a
    reading (neither used nor idle), with their share of the row's held GPU-hours in parentheses. When some
    GPU-hours have no price, an
    ``unpriced GPU-h`` column, the TOTAL line ends ``+ N unpriced GPU-hours (models …)`` (money totals cover the
    priced GPU-hours only), and a line per model of ``unpriced`` (:func:`unpriced_by_model`) says how to fix it.

    The hardware activity follows the existing columns: SM, tensor and DRAM activity and the profiled share as
    percentages, the SM-active cost in cents; ``not measured`` where nothing measured it (``unpriced`` for the
    SM-active cost of a measured row whose GPU-hours are all unpriced). The TOTAL line has the activity of all rows
    together (weighted by profiled seconds, as a row's)."""
    dicts = report_dicts(rows, by)
    if not dicts:
        return "No ledger rows in this period."
    with_unpriced = any(row.unpriced_gpu_seconds for row in rows) or bool(unpriced)
    headers = ["alloc GPU-h", "used GPU-h", "idle GPU-h", "unmetered GPU-h", "allocated", "used", "idle"]
    headers += ["energy kWh", "energy"]
    keys = ["allocated_gpu_hours", "used_gpu_hours", "idle_gpu_hours", "unmetered_gpu_hours", *MONEY_FIELDS[:3]]
    keys += ["energy_kwh", "energy_cost"]
    if with_unpriced:
        headers.insert(4, "unpriced GPU-h")
        keys.insert(4, "unpriced_gpu_hours")
    labels = [by, *(_JOB_HEADERS if by == "job" else ())]
    lines = [
        [*_labels(row, d[by], by), *(_cell(d[k], k, row) for k in keys), *_activity_cells(row, d)]
        for row, d in zip(rows, dicts, strict=True)
    ]
    total = merged_row("TOTAL", rows)
    totals = ["TOTAL", *[""] * (len(labels) - 1)]
    totals += [_cell(sum((Decimal(str(d[k] or 0)) for d in dicts), Decimal(0)), k, total) for k in keys]
    total_sm_active = None if total.sm_active_cost is None else quantize(total.sm_active_cost, Decimal("0.01"))
    totals += _activity_cells(total, {"sm_active_cost": total_sm_active})
    headers = [*labels, *headers, *_ACTIVITY_HEADERS]
    widths = [max(len(h), *(len(line[i]) for line in [*lines, totals])) for i, h in enumerate(headers)]
    out = [f"Costs in {dicts[0]['currency']}"]
    for line in [headers, *lines, totals]:
        cells = [
            cell.ljust(width) if i < len(labels) else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(line, widths, strict=True))
        ]
        out.append("  ".join(cells).rstrip())
    if with_unpriced:
        seconds = sum(row.unpriced_gpu_seconds for row in rows)
        models = ", ".join(u.model for u in unpriced) or "see gpu_model report"
        out[-1] += f"  + {seconds / 3600:,.2f} unpriced GPU-hours (models {models})"
        out.extend(f"unpriced: {u.gpu_hours:,.2f} GPU-hours of {u.model}: {u.fix}" for u in unpriced)
    return "\n".join(out)


_ACTIVITY_HEADERS = ("SM active", "tensor active", "DRAM active", "SM-active cost", "profiled")
_JOB_HEADERS = ("name", "team", "user", "start (UTC)", "end (UTC)", "state", "GPUs")
_JOB_NAME_WIDTH = 24


def _labels(row: ReportRow, key: object, by: GroupBy) -> list[str]:
    """The left-hand cells of a table row: the group's key, and by job its name (cut to 24 characters), team,
    user, start and end (``running`` while it runs), state and GPUs."""
    if by != "job":
        return [str(key)]
    job = row.job
    if job is None:
        return [str(key), "", row.team or "", "", "", "", "", ""]
    name = job.name if len(job.name) <= _JOB_NAME_WIDTH else job.name[: _JOB_NAME_WIDTH - 1] + "…"
    start = f"{job.start:%Y-%m-%d %H:%M}" if job.start else ""
    end = f"{job.end:%Y-%m-%d %H:%M}" if job.end else "running"
    return [str(key), name, row.team or "", row.user or "", start, end, job.state, str(job.gpus)]


def _activity_cells(row: ReportRow, printed: Mapping[str, object]) -> list[str]:
    """The activity cells of a table row: SM, tensor and DRAM activity and the profiled share as percentages, and
    the SM-active cost as ``printed`` has it (cents); ``not measured`` for None (``unpriced`` for the SM-active cost
    of a row whose SM activity was measured but whose GPU-hours are all unpriced)."""
    ratios = [row.activity_ratio(field) for field in ACTIVITY_FIELDS]
    cost = printed["sm_active_cost"]
    if cost is None:
        cost_cell = "unpriced" if row.unpriced_only and ratios[0] is not None else NOT_MEASURED
    else:
        cost_cell = _cell(cost)
    return [*(_percent(ratio) for ratio in ratios), cost_cell, _percent(row.profiled_share)]


def _percent(ratio: float | None) -> str:
    return NOT_MEASURED if ratio is None else f"{ratio:.1%}"


def _cell(value: object, key: str = "", row: ReportRow | None = None) -> str:
    """A table cell: None is ``unpriced``, numbers with two decimals and thousands separators; the unmetered
    GPU-hours of a ``row`` that held some are followed by their share of its held GPU-hours, ``12.00 (25.0%)``."""
    if key == "unmetered_gpu_hours" and row is not None and (share := row.unmetered_share):
        return f"{_cell(value)} ({share:.1%})"
    if value is None:
        return "unpriced"
    if isinstance(value, (float, Decimal)):
        return f"{value:,.2f}"
    if isinstance(value, str) and value.replace(".", "", 1).lstrip("-").isdigit():
        return f"{Decimal(value):,.2f}"
    return str(value)
