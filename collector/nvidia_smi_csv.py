"""Parsing ``nvidia-smi --query-gpu=… --format=csv`` output into plain values.

Format (``nvidia-smi --help-query-gpu``): a header line of field names, each followed by its unit in
brackets where it has one (``memory.used [MiB]``), then one line per GPU; values carry the unit after a
space (``19818 MiB``, ``631.95 W``, ``100 %``). Unavailable values are written ``[N/A]``,
``[Not Supported]``, ``[Unknown Error]``, ``[Insufficient Permissions]`` or
``[Requested functionality has been deprecated]``; those become None.
"""

from __future__ import annotations

import csv
import io
import logging

UNAVAILABLE_PREFIX = "["
UNITS = frozenset({"%", "MiB", "W", "MHz", "C", "us"})
"""Units nvidia-smi prints after a number (``--format=csv`` without ``nounits``)."""

log = logging.getLogger(__name__)


def parse_query_gpu_csv(text: str, source: str = "nvidia-smi") -> list[dict[str, str | None]]:
    """One dict per GPU line: field name without its unit → value without its unit, or None if unavailable.

    A line with a different number of fields than the header is logged (``source`` and line number) and
    skipped; the other lines are returned.
    """
    rows = list(csv.reader(io.StringIO(text.strip()), skipinitialspace=True))
    if not rows:
        return []
    names = [cell.split(" [", 1)[0].strip() for cell in rows[0]]
    parsed = []
    for number, row in enumerate(rows[1:], start=2):
        if len(row) != len(names):
            log.warning("%s line %d: %d fields, header has %d; line skipped", source, number, len(row), len(names))
            continue
        parsed.append({name: _value(cell) for name, cell in zip(names, row, strict=True)})
    return parsed


def _value(cell: str) -> str | None:
    cell = cell.strip()
    if cell.startswith(UNAVAILABLE_PREFIX):
        return None
    number, _, unit = cell.partition(" ")
    return number if unit in UNITS else cell
