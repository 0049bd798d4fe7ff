"""CSV text safe to open in a spreadsheet: every CSV the project writes goes through here (RFC 4180 plus OWASP's
CSV-injection defence).

A spreadsheet runs a cell that begins with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return as a formula
(OWASP, "CSV Injection"). Job, pod, user and team names are chosen by users (``sbatch -J '=HYPERLINK(…)'``), so a
*text cell* beginning with one of those characters is written with a leading single quote and in double quotes
(``"'=HYPERLINK(…)"``): the spreadsheet shows it as text, the quote visible.

Which cells are text: a ``str`` value that is not a plain ASCII decimal number (:data:`NUMBER`: ``-12.50``,
``+3``, ``1.5e-05``). Non-``str`` values (int, float, Decimal, bool) and number text are the project's own figures
and written unchanged, so a negative amount stays ``-12.50``; a number cannot be a formula. ``None`` is an empty
field. Other cells are quoted only when they hold a comma, a double quote or a line break (``csv`` module's
QUOTE_MINIMAL), a double quote doubled.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

FORMULA_LEADS = ("=", "+", "-", "@", "\t", "\r")
"""The first characters that make a spreadsheet read a cell as a formula (OWASP, "CSV Injection")."""

NUMBER = re.compile(r"[+-]?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
"""Plain decimal number text (ASCII digits only): written unchanged even when it begins with ``-`` or ``+``."""

_NEEDS_QUOTES = re.compile(r'[,"\r\n]')


def cell(value: object) -> str:
    """One CSV field for ``value``: escaped and quoted when it is text a spreadsheet would run as a formula
    (module docstring), otherwise as the ``csv`` module writes it (None empty, quoted only when needed)."""
    if value is None:
        return ""
    text = str(value)
    if isinstance(value, str) and text.startswith(FORMULA_LEADS) and not NUMBER.fullmatch(text):
        return "\"'" + text.replace('"', '""') + '"'
    return '"' + text.replace('"', '""') + '"' if _NEEDS_QUOTES.search(text) else text


def csv_line(values: Iterable[object], end: str = "\n") -> str:
    """One CSV record of ``values`` (each through :func:`cell`), ended by ``end``."""
    return ",".join(cell(value) for value in values) + end


def dict_rows_csv(fieldnames: Sequence[str], rows: Iterable[Mapping[str, object]], end: str = "\n") -> str:
    """A header line of ``fieldnames`` and one record per row (its values for ``fieldnames``; a missing key is an
    empty field, keys not in ``fieldnames`` are left out), each line ended by ``end``."""
    lines = [csv_line(fieldnames, end)]
    lines += [csv_line((row.get(name) for name in fieldnames), end) for row in rows]
    return "".join(lines)
