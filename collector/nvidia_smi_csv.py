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

UNAVAILABLE_PREFIX = "["


def parse_query_gpu_csv(text: str) -> list[dict[str, str | None]]:
    """One dict per GPU line: field name without its unit → value without its unit, or None if unavailable.

    Raises ValueError naming the line when a line has a different number of fields than the header.
    """
    rows = list(csv.reader(io.StringIO(text.strip()), skipinitialspace=True))
    if not rows:
        return []
    names = [cell.split(" [", 1)[0].strip() for cell in rows[0]]
    parsed = []
    for number, row in enumerate(rows[1:], start=2):
        if len(row) != len(names):
            raise ValueError(f"line {number}: {len(row)} fields, header has {len(names)}")
        parsed.append({name: _value(cell) for name, cell in zip(names, row, strict=True)})
    return parsed


def _value(cell: str) -> str | None:
    cell = cell.strip()
    if cell.startswith(UNAVAILABLE_PREFIX):
        return None
    number, _, unit = cell.partition(" ")
    return number if unit in ("%", "MiB", "W", "MHz", "C") else cell
