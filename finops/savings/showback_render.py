"""A showback statement rendered plainly: as text (the e-mail's text part, ``gpu-finops showback``'s output) and as
CSV (the attachment), knowing no section (:mod:`finops.savings.showback_statement`); the e-mail's HTML is
:mod:`alerts.showback`'s."""

from __future__ import annotations

from finops.csv_cells import dict_rows_csv
from finops.savings.showback_statement import Cell, ColumnKind, Section, Statement, sum_cells


def cell_text(value: Cell, kind: ColumnKind) -> str:
    """A cell as text: money ``1,234.50`` (None: ``unpriced``), hours ``12.50``, percent ``85.0 %`` (None:
    ``n/a``), text as it is; ``""`` (a total row's cell of a column not added up) stays empty."""
    if isinstance(value, str):
        return value
    if kind == "money":
        return "unpriced" if value is None else f"{value:,.2f}"
    if kind == "hours":
        return "" if value is None else f"{value:,.2f}"
    if kind == "percent":
        return "n/a" if value is None else f"{value} %"
    return "" if value is None else str(value)


def shown_rows(section: Section) -> list[tuple[Cell, ...]]:
    """The rows a reader is shown: the first :attr:`Section.shown` and, when there are more, one row summing the
    rest (``3 more jobs (in the CSV)``), so the shown rows still add up to the total."""
    if section.shown is None or len(section.rows) <= section.shown:
        return list(section.rows)
    rest = section.rows[section.shown :]
    more: list[Cell] = [f"{len(rest)} more {section.noun} (in the CSV)"]
    for index, column in enumerate(section.columns[1:], start=1):
        more.append(sum_cells([row[index] for row in rest]) if column.kind in ("money", "hours") else "")
    return [*section.rows[: section.shown], tuple(more)]


def statement_text(statement: Statement) -> str:
    """The statement as plain text (the e-mail's text part, ``gpu-finops showback``'s output): title, summary, then
    each section: title, note, and its table in fixed-width columns (one row alone as ``name: value`` lines)."""
    lines = [statement.title, "", statement.summary]
    if statement.pending_hours:
        lines.append(pending_note(statement))
    lines.append(
        f"Period: {statement.start:%Y-%m-%d %H:%M} – {statement.end:%Y-%m-%d %H:%M} UTC. Money in {statement.currency}."
    )
    for section in statement.sections:
        lines += ["", section.title, "-" * len(section.title)]
        if section.note:
            lines.append(section.note)
        if not section.rows:
            continue
        if len(section.rows) == 1 and section.total is None:
            width = max(len(c.title) for c in section.columns)
            lines += [
                f"{c.title + ':':<{width + 1}} {cell_text(v, c.kind)}"
                for c, v in zip(section.columns, section.rows[0], strict=True)
            ]
            continue
        table = [[c.title for c in section.columns]]
        for row in [*shown_rows(section), *([section.total] if section.total else [])]:
            table.append([cell_text(v, c.kind) for c, v in zip(section.columns, row, strict=True)])
        widths = [max(len(line[i]) for line in table) for i in range(len(section.columns))]
        for line in table:
            cells = [
                cell.ljust(w) if c.kind == "text" else cell.rjust(w)
                for cell, w, c in zip(line, widths, section.columns, strict=True)
            ]
            lines.append("  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"


def pending_note(statement: Statement) -> str:
    """The sentence saying the statement's figures may change (pending ledger hours); "" when none were pending."""
    hours = statement.pending_hours
    if not hours:
        return ""
    return (
        f"Note: {hours} ledger hour{'s' if hours != 1 else ''} of this period "
        f"{'were' if hours != 1 else 'was'} waiting for a rollup when this was made: figures may change."
    )


def statement_csv(statement: Statement) -> str:
    """Every row of every section as CSV with a header line: ``month`` (``YYYY-MM``), ``team``, ``currency``,
    ``section`` (its key), then the columns of all sections by key in the order they first appear (a row's cell of
    another section's column is empty). Money in cents as plain decimals (``1234.50``), GPU-hours rounded to 6 decimals,
    percents with one; unknown (unpriced) cells empty. Totals are left out: the rows add up to them."""
    keys: list[str] = []
    for section in statement.sections:
        keys += [c.key for c in section.columns if c.key not in keys]
    base = {"month": f"{statement.month:%Y-%m}", "team": statement.team, "currency": statement.currency}
    rows = [
        {**base, "section": section.key, **{c.key: v for c, v in zip(section.columns, row, strict=True)}}
        for section in statement.sections
        for row in section.rows
    ]
    return dict_rows_csv(["month", "team", "currency", "section", *keys], rows)


def csv_filename(statement: Statement) -> str:
    """The CSV attachment's file name: ``showback-2026-10-vision.csv`` (the team name's characters other than
    letters, digits, ``-``, ``_`` and ``.`` as ``_``)."""
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in statement.team)
    return f"showback-{statement.month:%Y-%m}-{safe}.csv"
