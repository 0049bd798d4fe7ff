"""Slurm hostlist expressions (``n[01-03,07]``, as in sacct's NodeList): expand them to host names, count
them without expanding, and write host names back as one.

Format source: Slurm's ``src/common/hostlist.c`` (the bracket syntax, ``hostlist_ranged_string``, MAX_RANGE);
``None assigned`` is what slurmdbd writes for a job without nodes
(``src/plugins/accounting_storage/mysql/as_mysql_job.c``).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable

NO_NODES = "None assigned"  # NodeList of a job that never got nodes (slurmdbd writes this text)
_MAX_HOSTS = 64 * 1024  # cap per hostlist, against a corrupt line; Slurm caps one range at 64K (MAX_RANGE)
_MAX_DIGITS = 18  # digits of a bracket number: Slurm reads them as unsigned long (hostlist.c), at most 2**64
MAX_HOSTNAME_LENGTH = 255
"""Longest host name a hostlist may expand to (the width of ``nodes.hostname``; DNS names are at most 253)."""

_RANGE_RE = re.compile(r"([0-9]+)(?:-([0-9]+))?")
_NOT_IN_HOSTNAME_RE = re.compile(r"[\[\],\s]")


def expand_hostlist(text: str) -> list[str]:
    """Host names of a Slurm hostlist expression, in the order it lists them (duplicates kept).

    Syntax (Slurm ``hostlist.c``): comma-separated items; in an item each ``[...]`` holds comma-separated
    numbers and ``lo-hi`` ranges, padded to the width of the number as written (``n[08-10]`` -> ``n08``,
    ``n09``, ``n10``; ``n[9-10]`` -> ``n9``, ``n10``). Text may follow a bracket (``n[1-2]-ib``) and an item
    may hold several brackets, expanded as nested loops with the last innermost (``r[1-2]n[1-2]`` -> ``r1n1``,
    ``r1n2``, ``r2n1``, ``r2n2``). ``""`` and ``None assigned`` give ``[]``.

    The host count is computed from the ranges before anything is expanded (:func:`hostlist_size`), so an
    expression of a few bytes naming billions of hosts is refused in constant memory.

    Raises ValueError naming the expression for an empty item, an unmatched or nested bracket, whitespace,
    a bracket entry that is not a number or ascending range, or more than 65536 hosts.
    """
    if text in ("", NO_NODES):
        return []
    items = [_parse_item(item, text) for item in _split_hostlist(text)]
    if _count(items) > _MAX_HOSTS:
        raise ValueError(f"hostlist {shown_text(text)}: more than {_MAX_HOSTS} hosts")
    hosts: list[str] = []
    for pieces in items:
        choices = [_numbers(piece) if isinstance(piece, list) else [piece] for piece in pieces]
        hosts.extend("".join(parts) for parts in itertools.product(*choices))
    return hosts


def hostlist_size(text: str) -> int:
    """How many hosts a hostlist expression names (:func:`expand_hostlist`'s length), computed from its ranges
    without expanding them: the sum over items of the product over brackets of the sum of ``hi - lo + 1``.
    ValueError as :func:`expand_hostlist` for a malformed expression (not for its size)."""
    if text in ("", NO_NODES):
        return 0
    return _count([_parse_item(item, text) for item in _split_hostlist(text)])


_Range = tuple[int, int, int]  # lo, hi, width of one bracket entry
_Piece = str | list[_Range]  # literal text, or one bracket's ranges


def _parse_item(item: str, text: str) -> list[_Piece]:
    """An item's literal texts and brackets (each as its ranges), alternating, unexpanded. ValueError when its
    longest host name would exceed :data:`MAX_HOSTNAME_LENGTH`."""
    pieces = re.split(r"\[([^\]]*)\]", item)  # text, bracket, text, bracket, ..., text
    parsed: list[_Piece] = [_bracket_ranges(piece, text) if i % 2 else piece for i, piece in enumerate(pieces)]
    longest = sum(
        max(max(width, len(str(hi))) for _, hi, width in piece) if isinstance(piece, list) else len(piece)
        for piece in parsed
    )
    if longest > MAX_HOSTNAME_LENGTH:
        raise ValueError(f"hostlist {shown_text(text)}: a host name longer than {MAX_HOSTNAME_LENGTH} characters")
    return parsed


def shown_text(text: str) -> str:
    """``text`` quoted for a message, its first 80 characters only (with ``…``) when longer."""
    return repr(text) if len(text) <= 80 else f"{text[:80]!r}…"


def _count(items: list[list[_Piece]]) -> int:
    """Hosts named by parsed items (Python integers: no overflow however large)."""
    return sum(
        math.prod(sum(hi - lo + 1 for lo, hi, _ in piece) for piece in pieces if isinstance(piece, list))
        for pieces in items
    )


def _numbers(ranges: list[_Range]) -> list[str]:
    """A bracket's host numbers, each padded to its range's width."""
    return [f"{number:0{width}d}" for lo, hi, width in ranges for number in range(lo, hi + 1)]


def compress_hostlist(nodes: Iterable[str]) -> str:
    """The Slurm hostlist expression for ``nodes``, keeping their order: ``expand_hostlist`` of the result
    gives ``nodes`` back.

    As Slurm's ``hostlist_ranged_string``: a host name splits into a prefix and a numeric suffix (its trailing
    digits); consecutive hosts with the same prefix share one bracket; within it, a host whose number is one
    more than the previous one's and prints the same at the range's width extends the range. So
    ``["n01", "n02", "n03", "n07"]`` -> ``n[01-03,07]``, ``["n9", "n10"]`` -> ``n[9-10]``, ``["a1", "a2",
    "b-7"]`` -> ``a[1-2],b-7``; a lone host or one without digits is written bare. ``[]`` gives ``""``.

    Raises ValueError for an empty host name or one holding ``[``, ``]``, ``,`` or whitespace.
    """
    runs: list[tuple[str, list[list[int]]]] = []  # (prefix, ranges as [lo, hi, width]); no ranges: bare name
    for host in nodes:
        if not host or _NOT_IN_HOSTNAME_RE.search(host):
            raise ValueError(f"host name {host!r} cannot be written in a hostlist")
        prefix = host.rstrip("0123456789")  # Slurm's split: the numeric suffix is the trailing digits
        digits = host[len(prefix) :]
        if not digits:
            runs.append((host, []))
            continue
        number = int(digits)
        if runs and runs[-1][0] == prefix and runs[-1][1]:
            last = runs[-1][1][-1]
            if number == last[1] + 1 and f"{number:0{last[2]}d}" == digits:
                last[1] = number
            else:
                runs[-1][1].append([number, number, len(digits)])
        else:
            runs.append((prefix, [[number, number, len(digits)]]))
    return ",".join(_run_text(prefix, ranges) for prefix, ranges in runs)


def _split_hostlist(text: str) -> list[str]:
    """The top-level comma-separated items of a hostlist (commas inside brackets do not split)."""
    items: list[str] = []
    start = 0
    in_bracket = False
    for i, char in enumerate(text):
        if char == "[":
            if in_bracket:
                raise ValueError(f"hostlist {shown_text(text)}: nested '[' at offset {i}")
            in_bracket = True
        elif char == "]":
            if not in_bracket:
                raise ValueError(f"hostlist {shown_text(text)}: ']' without '[' at offset {i}")
            in_bracket = False
        elif char == "," and not in_bracket:
            items.append(text[start:i])
            start = i + 1
        elif char.isspace():
            raise ValueError(f"hostlist {shown_text(text)}: whitespace at offset {i}")
    if in_bracket:
        raise ValueError(f"hostlist {shown_text(text)}: '[' without ']'")
    items.append(text[start:])
    if "" in items:
        raise ValueError(f"hostlist {shown_text(text)}: empty host name")
    return items


def _bracket_ranges(inner: str, text: str) -> list[_Range]:
    """The ranges of one bracket's contents, e.g. ``01-03,07`` -> ``[(1, 3, 2), (7, 7, 2)]``."""
    ranges: list[_Range] = []
    for entry in inner.split(","):
        match = _RANGE_RE.fullmatch(entry)
        if match is None:
            raise ValueError(f"hostlist {shown_text(text)}: {shown_text(entry)} is not a number or lo-hi range")
        lo_text, hi_text = match.group(1), match.group(2) or match.group(1)
        if max(len(lo_text), len(hi_text)) > _MAX_DIGITS:
            raise ValueError(
                f"hostlist {shown_text(text)}: {shown_text(entry)} has a number of more than {_MAX_DIGITS} digits"
            )
        lo, hi = int(lo_text), int(hi_text)
        if lo > hi:
            raise ValueError(f"hostlist {shown_text(text)}: range {shown_text(entry)} is descending")
        ranges.append((lo, hi, len(lo_text)))
    return ranges


def _run_text(prefix: str, ranges: list[list[int]]) -> str:
    """One hostlist item: a bare host name, ``prefix<number>`` or ``prefix[lo-hi,n,...]``."""
    if not ranges:
        return prefix
    texts = [f"{lo:0{width}d}" if lo == hi else f"{lo:0{width}d}-{hi:0{width}d}" for lo, hi, width in ranges]
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return prefix + texts[0]
    return f"{prefix}[{','.join(texts)}]"
