"""Slurm accounting records: parse ``sacct`` output into jobs, and write jobs back in the same format.

The input is what this command prints, one job or job step per line::

    sacct --parsable2 --noheader \\
      --format=JobID,JobIDRaw,Cluster,Partition,Account,User,Submit,Start,End,Elapsed,State,AllocTRES,NodeList,JobName

Format sources: the sacct(1) man page (``--parsable2``: fields separated by ``|``, no ``|`` at the end of
the line; the JobID forms; Elapsed; Start/End; JOB STATE CODES) and Slurm's own source, which fixes what the
man page leaves open: ``src/sacct/print.c`` (``CANCELLED by <uid>``), ``src/common/parse_time.c`` (times
printed as local ``%FT%T``, ``Unknown`` for an unset time, ``None`` for NO_VAL; Elapsed printed
``[D-]HH:MM:SS``), ``src/common/slurmdb_defs.c`` (AllocTRES is ``name=count`` items sorted by name, memory
with a unit suffix, other counts plain integers), ``src/common/hostlist.c`` (NodeList hostlist syntax) and
``src/plugins/accounting_storage/mysql/as_mysql_job.c`` (``None assigned`` for a job without nodes).

sacct escapes nothing: a ``|`` inside a job name is printed as is. JobName is the last field of this format,
so the parser splits on the first 13 ``|`` only and a job name keeps any ``|`` it holds. Times are only
parsable in the default layout: run sacct with ``SLURM_TIME_FORMAT`` unset (or ``standard``) and without
``--delimiter``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import TypeVar

from collector.contract.bounds import JOB_ID_MAX_LENGTH
from finops.jobs.slurm_hostlist import NO_NODES, compress_hostlist, expand_hostlist, shown_text

SACCT_FIELDS: tuple[str, ...] = (
    "JobID",
    "JobIDRaw",
    "Cluster",
    "Partition",
    "Account",
    "User",
    "Submit",
    "Start",
    "End",
    "Elapsed",
    "State",
    "AllocTRES",
    "NodeList",
    "JobName",
)
"""The ``--format`` fields, in the order the parser expects them and :func:`format_sacct_line` writes them."""

_TIME_UNSET = ("Unknown", "None")  # slurm_make_time_str: time 0 or INFINITE -> Unknown, NO_VAL -> None

_TIME_RE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})")
_ELAPSED_RE = re.compile(r"(?:(?:([0-9]+)-)?([0-9]{2}):)?([0-9]{2}):([0-9]{2})")
_STATE_RE = re.compile(r"([A-Z][A-Z_]*)(?: by ([0-9]+))?")
# A job: JobID, ArrayJobID_TaskID, ArrayJobID_[pending tasks] or HetJobID+Offset. A step adds ".<step>".
_JOB_ID_RE = re.compile(r"[0-9]+(?:_(?:[0-9]+|\[[^\]]+\])|\+[0-9]+)?")
_GPU_TYPE_RE = re.compile(r"[^\s,=|]+")

_T = TypeVar("_T")

FIELD_MAX_LENGTHS: dict[str, int] = {
    "JobID": JOB_ID_MAX_LENGTH,
    "JobIDRaw": 64,
    "Cluster": 128,
    "Partition": 128,
    "Account": 128,
    "User": 128,
    "State": 64,
    "JobName": 255,
}
"""Longest text of each stored field, in characters: the widths of the ``jobs`` columns they are stored in
(:class:`finops.db.models.Job`; ``State`` holds ``CANCELLED by <uid>``, its code is at most 32). A longer field
refuses its line, named, and the other lines are read."""
NODE_LIST_MAX_LENGTH = 4096
"""Longest node list stored with a job (``jobs.node_list``), written as
:func:`~finops.jobs.slurm_hostlist.compress_hostlist` writes it."""
GPU_TYPE_MAX_LENGTH = 64
"""Longest GRES type stored with a job (``jobs.gpu_type``)."""


@dataclass(frozen=True, slots=True)
class SacctJob:
    """One job (not a job step) from sacct.

    - ``job_id``: JobID as sacct writes it: ``123``, array task ``123_4``, the pending rest of an array
      ``123_[5-10%2]``, heterogeneous component ``123+0``.
    - ``job_id_raw``: JobIDRaw, the unique numeric job ID as text (an array task or a het component has its
      own, e.g. ``123_4`` -> ``127``).
    - ``cluster``, ``partition``, ``account``, ``user``: as written (a pending job's partition may be a
      comma-separated list).
    - ``submit``: Submit, timezone-aware UTC. ``start``, ``end``: Start and End, aware UTC, or None where
      sacct writes ``Unknown`` or ``None`` (a pending job's Start, a running job's End).
    - ``elapsed``: Elapsed, whole seconds; for a running job the time run so far.
    - ``state``: the job state code, e.g. ``COMPLETED``, ``RUNNING``, ``CANCELLED``, ``OUT_OF_MEMORY``.
      ``cancelled_by``: the uid in ``CANCELLED by <uid>``, else None.
    - ``gpus``: GPUs allocated (0 for none or pending); ``gpu_type``: the GRES type, e.g. ``h100``, when
      AllocTRES names exactly one type covering all of them, else None. See :func:`parse_gpu_tres`.
    - ``nodes``: NodeList expanded to host names in sacct's order, ``()`` for ``None assigned``.
    - ``name``: JobName.
    """

    job_id: str
    job_id_raw: str
    cluster: str
    partition: str
    account: str
    user: str
    submit: datetime
    start: datetime | None
    end: datetime | None
    elapsed: timedelta
    state: str
    cancelled_by: int | None
    gpus: int
    gpu_type: str | None
    nodes: tuple[str, ...]
    name: str


@dataclass(frozen=True, slots=True)
class SacctLineError:
    """A line :func:`parse_sacct` could not read.

    ``line_number`` is 1-based over the input lines (blank ones included); ``message`` reads
    ``<source>:<line_number>: field <Field>: <what is wrong>`` (or names the field count); ``line`` is the
    line without its line ending.
    """

    line_number: int
    message: str
    line: str


@dataclass(frozen=True, slots=True)
class SacctParseResult:
    """What :func:`parse_sacct` read: ``jobs`` in input order (job steps left out) and one entry in
    ``errors`` per unreadable line, also in input order."""

    jobs: list[SacctJob]
    errors: list[SacctLineError]


CLOCK_SKEW = timedelta(minutes=5)
"""How far past the import's time a job's time may lie before its line is refused (:func:`parse_sacct`'s
``not_after``): the clocks of the sacct host and this one may differ a little, a time zone offset is 15 minutes or
more."""


def parse_sacct(
    lines: Iterable[str], *, tz: tzinfo = UTC, source: str = "<stdin>", not_after: datetime | None = None
) -> SacctParseResult:
    """Parse ``sacct --parsable2 --noheader`` output in the :data:`SACCT_FIELDS` format.

    ``lines``: the output's lines (an open text file, a list; line endings are dropped) or the whole output
    as one ``str``. ``tz``: the time zone sacct printed Submit/Start/End in (the local zone of the host that
    ran sacct); the results are aware UTC. A time repeated by a daylight-saving change is read as its first
    occurrence. ``source``: the name used in error messages.

    Job steps (``123.batch``, ``123.extern``, ``123.0``, ``123_4.batch``, ``123+0.0``) are skipped; blank lines
    are ignored. A malformed line (wrong field count, bad time, Elapsed, State, AllocTRES or NodeList) becomes
    a :class:`SacctLineError` and the other lines are still read.

    ``not_after`` (aware): the import's time. A line whose Submit, Start or End lies more than :data:`CLOCK_SKEW`
    after it is refused: sacct cannot have seen it, so its times were read in the wrong zone (the error names the
    ``--timezone`` fix).
    """
    if isinstance(lines, str):
        lines = lines.split("\n")
    jobs: list[SacctJob] = []
    errors: list[SacctLineError] = []
    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r\n")
        if not line.strip():
            continue
        try:
            job = _parse_line(line, tz)
            if job is not None and not_after is not None:
                _check_not_future(job, tz, not_after)
        except ValueError as exc:
            errors.append(SacctLineError(number, f"{source}:{number}: {exc}", line))
            continue
        if job is not None:
            jobs.append(job)
    return SacctParseResult(jobs, errors)


def format_sacct_line(job: SacctJob, *, tz: tzinfo = UTC) -> str:
    """One line (no line ending) in the :data:`SACCT_FIELDS` ``--parsable2`` format; the inverse of
    :func:`parse_sacct` for a job it produced.

    Times are written as local time in ``tz`` (``YYYY-MM-DDTHH:MM:SS``, fraction dropped), a missing one as
    ``Unknown``; Elapsed as ``[D-]HH:MM:SS``; State as ``CANCELLED by <uid>`` when ``cancelled_by`` is set;
    AllocTRES holds only the GPU items (``gres/gpu:<type>=N,gres/gpu=N``, ``gres/gpu=N`` or empty); NodeList
    is :func:`~finops.jobs.slurm_hostlist.compress_hostlist` of the nodes, ``None assigned`` for none.

    Raises ValueError when the job cannot be written so that it reads back the same: a naive datetime,
    negative elapsed or GPU count, a GPU type holding ``,``, ``=``, ``|`` or whitespace, a host name
    :func:`~finops.jobs.slurm_hostlist.compress_hostlist` refuses, a line break in any field or a ``|`` in any
    field but the last.
    """
    state = job.state if job.cancelled_by is None else f"{job.state} by {job.cancelled_by}"
    values = (
        job.job_id,
        job.job_id_raw,
        job.cluster,
        job.partition,
        job.account,
        job.user,
        _format_time(job.submit, tz),
        _format_time(job.start, tz),
        _format_time(job.end, tz),
        _format_elapsed(job.elapsed),
        state,
        _format_gpu_tres(job.gpus, job.gpu_type),
        compress_hostlist(job.nodes) or NO_NODES,
        job.name,
    )
    for name, value in zip(SACCT_FIELDS, values, strict=True):
        if "\n" in value or "\r" in value or ("|" in value and name != SACCT_FIELDS[-1]):
            raise ValueError(f"field {name}: {value!r} cannot be written in one '|'-separated line")
    return "|".join(values)


def parse_gpu_tres(text: str) -> tuple[int, str | None]:
    """GPU count and type from an AllocTRES value such as
    ``billing=64,cpu=64,gres/gpu:h100=4,gres/gpu=4,mem=500G,node=1``, ``gres/gpu=8`` or ``""``.

    The count is the untyped ``gres/gpu=N`` if present, else the sum of the typed ``gres/gpu:<type>=N``
    items, else 0. The type is ``<type>`` when exactly one typed item is present and its count equals the
    total, else None (untyped only, mixed types, or typed items covering only part of the GPUs). Other items
    (``gres/gpumem``, ``mem=500G``, ...) are only checked to be ``name=value``.

    Raises ValueError for an item that is not ``name=value``, a repeated name, or a GPU count that is not a
    non-negative integer.
    """
    if not text:
        return 0, None
    seen: set[str] = set()
    untyped: int | None = None
    typed: dict[str, int] = {}
    for item in text.split(","):
        name, sep, value = item.partition("=")
        if not (name and sep and value):
            raise ValueError(f"{item!r} is not name=value")
        if name in seen:
            raise ValueError(f"{name!r} appears twice")
        seen.add(name)
        if name == "gres/gpu":
            untyped = _gpu_count(item, value)
        elif name.startswith("gres/gpu:"):
            gpu_type = name.removeprefix("gres/gpu:")
            if not _GPU_TYPE_RE.fullmatch(gpu_type):
                raise ValueError(f"{shown_text(item)} has no valid GPU type")
            if len(gpu_type) > GPU_TYPE_MAX_LENGTH:
                raise ValueError(
                    f"GPU type {shown_text(gpu_type)} is longer than the {GPU_TYPE_MAX_LENGTH} characters stored"
                )
            typed[gpu_type] = _gpu_count(item, value)
    total = sum(typed.values()) if untyped is None else untyped
    if len(typed) == 1:
        [(gpu_type, count)] = typed.items()
        if count == total:
            return total, gpu_type
    return total, None


def parse_elapsed(text: str) -> timedelta:
    """An Elapsed value as a timedelta: ``[D-]HH:MM:SS`` as sacct prints it (``00:05:00``, ``10-13:27:06``),
    or ``MM:SS`` as the man page also allows.

    Raises ValueError for any other form, or hours > 23, minutes or seconds > 59.
    """
    match = _ELAPSED_RE.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not [D-]HH:MM:SS")
    days, hours, minutes, seconds = (int(group or 0) for group in match.groups())
    if hours > 23 or minutes > 59 or seconds > 59:
        raise ValueError(f"{text!r} has hours above 23 or minutes or seconds above 59")
    try:
        return timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
    except OverflowError:
        raise ValueError(f"{text!r} is too long a time") from None


def _parse_line(line: str, tz: tzinfo) -> SacctJob | None:
    """The job on ``line``, or None for a job step. Raises ValueError naming the bad field."""
    parts = line.split("|", len(SACCT_FIELDS) - 1)
    if len(parts) != len(SACCT_FIELDS):
        raise ValueError(f"expected {len(SACCT_FIELDS)} '|'-separated fields, found {len(parts)}")
    fields = dict(zip(SACCT_FIELDS, parts, strict=True))
    for name, longest in FIELD_MAX_LENGTHS.items():
        if len(fields[name]) > longest:
            raise ValueError(f"field {name}: {len(fields[name])} characters, more than the {longest} stored")

    def field(name: str, parse: Callable[[str], _T]) -> _T:
        try:
            return parse(fields[name])
        except ValueError as exc:
            raise ValueError(f"field {name}: {exc}") from None

    def time_field(name: str) -> datetime | None:
        return field(name, lambda text: _parse_time(text, tz))

    if field("JobID", _is_step):
        return None
    job_id_raw = field("JobIDRaw", _numeric_id)
    submit = time_field("Submit")
    if submit is None:
        raise ValueError(f"field Submit: {fields['Submit']!r}: a job always has a submit time")
    start, end = time_field("Start"), time_field("End")
    elapsed = field("Elapsed", parse_elapsed)
    state, cancelled_by = field("State", _parse_state)
    gpus, gpu_type = field("AllocTRES", parse_gpu_tres)
    nodes = field("NodeList", _stored_nodes)
    return SacctJob(
        job_id=fields["JobID"],
        job_id_raw=job_id_raw,
        cluster=fields["Cluster"],
        partition=fields["Partition"],
        account=fields["Account"],
        user=fields["User"],
        submit=submit,
        start=start,
        end=end,
        elapsed=elapsed,
        state=state,
        cancelled_by=cancelled_by,
        gpus=gpus,
        gpu_type=gpu_type,
        nodes=tuple(nodes),
        name=fields["JobName"],
    )


def _stored_nodes(text: str) -> list[str]:
    """NodeList's hosts (:func:`~finops.jobs.slurm_hostlist.expand_hostlist`), refused when their
    :func:`~finops.jobs.slurm_hostlist.compress_hostlist` form, as stored, exceeds :data:`NODE_LIST_MAX_LENGTH`
    characters."""
    nodes = expand_hostlist(text)
    stored = len(compress_hostlist(nodes))
    if stored > NODE_LIST_MAX_LENGTH:
        raise ValueError(
            f"{len(nodes)} hosts written in {stored} characters, more than the {NODE_LIST_MAX_LENGTH} stored"
        )
    return nodes


def _check_not_future(job: SacctJob, tz: tzinfo, not_after: datetime) -> None:
    """ValueError naming the first of the job's Submit, Start and End that lies more than :data:`CLOCK_SKEW` after
    ``not_after``, with the ``--timezone`` fix."""
    for name, value in (("Submit", job.submit), ("Start", job.start), ("End", job.end)):
        if value is not None and value > not_after + CLOCK_SKEW:
            ahead = (value - not_after).total_seconds() / 3600
            raise ValueError(
                f"field {name}: {_format_time(value, tz)} read in {tz} is {ahead:.1f} h after the import's time "
                f"{_format_time(not_after, UTC)}Z: sacct printed its host's local time; give its zone with "
                "--timezone (e.g. --timezone Europe/Berlin), or run sacct with TZ=UTC"
            )


def _is_step(job_id: str) -> bool:
    """Whether a JobID is a job step (``<job>.<step>``) rather than a job; ValueError if it is neither."""
    match = _JOB_ID_RE.match(job_id)
    if match is not None:
        rest = job_id[match.end() :]
        if not rest:
            return False
        if len(rest) > 1 and rest.startswith("."):
            return True
    raise ValueError(f"{job_id!r} is not a job ID (123, 123_4, 123_[5-9], 123+0, each optionally .<step>)")


def _numeric_id(text: str) -> str:
    """JobIDRaw of a job: digits only."""
    if not re.fullmatch(r"[0-9]+", text):
        raise ValueError(f"{text!r} is not a numeric job ID")
    return text


def _parse_time(text: str, tz: tzinfo) -> datetime | None:
    """A ``YYYY-MM-DDTHH:MM:SS`` local time in ``tz`` as aware UTC; None for ``Unknown`` or ``None``."""
    if text in _TIME_UNSET:
        return None
    match = _TIME_RE.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not YYYY-MM-DDTHH:MM:SS, Unknown or None")
    try:
        year, month, day, hour, minute, second = (int(group) for group in match.groups())
        return datetime(year, month, day, hour, minute, second, tzinfo=tz).astimezone(UTC)
    except (ValueError, OverflowError) as exc:
        raise ValueError(f"{text!r} is not a valid time ({exc})") from None


def _parse_state(text: str) -> tuple[str, int | None]:
    """State code and the uid of ``CANCELLED by <uid>`` (else None)."""
    match = _STATE_RE.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a job state such as COMPLETED or 'CANCELLED by 1000'")
    state, uid = match.groups()
    if uid is not None and state != "CANCELLED":
        raise ValueError(f"{text!r}: only CANCELLED is followed by 'by <uid>'")
    return state, None if uid is None else int(uid)


def _gpu_count(item: str, value: str) -> int:
    """The count of a ``gres/gpu`` TRES item."""
    if not re.fullmatch(r"[0-9]+", value):
        raise ValueError(f"{item!r}: GPU count is not a non-negative integer")
    return int(value)


def _format_time(value: datetime | None, tz: tzinfo) -> str:
    """``YYYY-MM-DDTHH:MM:SS`` in ``tz`` (fraction dropped), ``Unknown`` for None."""
    if value is None:
        return "Unknown"
    if value.tzinfo is None:
        raise ValueError(f"naive datetime {value.isoformat()}: times must be timezone-aware")
    return value.astimezone(tz).replace(tzinfo=None).isoformat(timespec="seconds")


def _format_elapsed(value: timedelta) -> str:
    """``[D-]HH:MM:SS`` as Slurm's ``secs2time_str`` writes it (fraction dropped)."""
    if value < timedelta(0):
        raise ValueError(f"negative elapsed time {value}")
    days, seconds = value.days, value.seconds
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    clock = f"{hours:02d}:{minutes:02d}:{seconds:02d}"
    return f"{days}-{clock}" if days else clock


def _format_gpu_tres(gpus: int, gpu_type: str | None) -> str:
    """AllocTRES GPU items as Slurm sorts them: ``gres/gpu:<type>=N,gres/gpu=N``, ``gres/gpu=N`` or ``""``."""
    if gpus < 0:
        raise ValueError(f"negative GPU count {gpus}")
    if gpu_type is None:
        return f"gres/gpu={gpus}" if gpus else ""
    if not _GPU_TYPE_RE.fullmatch(gpu_type):
        raise ValueError(f"GPU type {gpu_type!r} cannot be written in AllocTRES")
    return f"gres/gpu:{gpu_type}={gpus},gres/gpu={gpus}"
