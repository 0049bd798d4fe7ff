"""What the service commands share: the settings, the database (engine behind the migration gate, sessions),
the price catalog and idle policy the settings name, the rollup that commands changing the ledger's inputs run
before they return (and their ``--no-rollup``), ISO 8601 options, and reading input files.

Everything here raises :class:`~finops.errors.FinopsError` (or :class:`typer.BadParameter` for an option) for
a user error; the root group (:mod:`finops.cli.base`) shows it in one line and exits with code 2. This module
needs the service extra (SQLAlchemy, PyYAML, …); only :mod:`finops.cli` imports the modules that use it, in
one guarded place.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Annotated, TextIO

import typer
from pydantic import ValidationError
from sqlalchemy import Engine, make_url
from sqlalchemy.exc import ArgumentError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from finops.access.tokens import state
from finops.analysis.idle import IdlePolicy
from finops.cli.base import ENVIRONMENT_ERRORS, INCOMPLETE
from finops.db.engine import NotMigratedError, current_revision, make_engine, require_migrated, session_factory
from finops.db.models import ApiToken, NodeToken
from finops.errors import FinopsError
from finops.ingest.prometheus import PrometheusClient
from finops.ingest.prometheus_pull import PullOptions
from finops.ingest.tsdb_source import TsdbTelemetry
from finops.ledger.rollup_result import unpriced_fix
from finops.pricing.catalog import Pricing, load_catalog
from finops.service.scheduler import run_rollup
from finops.settings.combined import Settings
from finops.timeutil import month_start, parse_utc, period_bound, utc_now

STDIN = "-"
"""The file name that means standard input."""


def _database_unavailable(exc: Exception) -> str:
    """SQLAlchemy's OperationalError (the server refuses or is down, the file is locked) in one line."""
    assert isinstance(exc, OperationalError)
    return f"database: {exc.orig if exc.orig is not None else exc}"


ENVIRONMENT_ERRORS[OperationalError] = _database_unavailable


def utc_stamp(at: datetime | None, never: str = "-") -> str:
    """``at`` as ``2026-11-26T03:12:00Z`` for tables, ``never`` when None."""
    return never if at is None else at.strftime("%Y-%m-%dT%H:%M:%SZ")


TOKEN_COLUMNS = f"{'state':<8} {'created':<20} {'expires':<20} {'last used':<20} revoked"
"""The header of :func:`token_columns`."""


def token_columns(row: NodeToken | ApiToken, now: datetime) -> str:
    """A token's state (live, expired, revoked) at ``now`` and its times, under :data:`TOKEN_COLUMNS`: the columns
    that ``nodes token list`` and ``api-token list`` share."""
    return (
        f"{state(row, now):<8} {utc_stamp(row.created_at):<20} {utc_stamp(row.expires_at, 'never'):<20} "
        f"{utc_stamp(row.last_used_at):<20} {utc_stamp(row.revoked_at)}"
    )


def load_settings() -> Settings:
    """The settings from the environment (``FINOPS_*``). FinopsError naming each bad variable, in one line."""
    try:
        return Settings()
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            where = f"FINOPS_{str(error['loc'][0]).upper()}: " if error["loc"] else ""
            problems.append(where + error["msg"].removeprefix("Value error, "))
        raise FinopsError(f"settings: {'; '.join(problems)}") from exc


def open_engine(settings: Settings, *, migrated: bool = True) -> Engine:
    """An engine on the configured database; unless ``migrated`` is False, NotMigratedError (a FinopsError
    saying to run ``gpu-finops db upgrade``) when the database is not at the newest migration.
    FinopsError for a database URL SQLAlchemy cannot use or an SQLite directory that cannot be made."""
    try:
        engine = make_engine(settings.effective_database_url)
    except ArgumentError as exc:
        raise FinopsError(f"FINOPS_DATABASE_URL: {exc}") from exc
    except OSError as exc:
        raise FinopsError(f"FINOPS_DATABASE_URL: {exc.filename}: {exc.strerror}") from exc
    if migrated:
        try:
            require_migrated(engine)
        except NotMigratedError as exc:
            raise _with_demo_hint(exc, settings, engine) from exc
    return engine


def _with_demo_hint(exc: NotMigratedError, settings: Settings, engine: Engine) -> FinopsError:
    """``exc``, or when the default database is empty and the demo's exists, ``exc`` saying how to use the demo's."""
    demo = make_url(settings.demo_database_url).database
    if settings.database_url or current_revision(engine) is not None or demo is None or not Path(demo).is_file():
        return exc
    return FinopsError(f"{exc}; or, for the demo's data: export FINOPS_DATABASE_URL={settings.demo_database_url}")


def open_sessions(settings: Settings) -> sessionmaker[Session]:
    """Sessions on the migrated database (see :func:`open_engine`)."""
    return session_factory(open_engine(settings))


def load_pricing(settings: Settings) -> Pricing:
    """The price catalog (``FINOPS_PRICE_CATALOG``, else the packaged one) under ``FINOPS_PRICING_MODEL``.
    CatalogError (a FinopsError naming the file and field) for a catalog that cannot be read or is invalid."""
    return Pricing(load_catalog(settings.price_catalog), settings.pricing_model)


def idle_policy(settings: Settings) -> IdlePolicy:
    """The idle detection thresholds of the ``FINOPS_IDLE_*`` settings, with the waste reasons' of the
    ``FINOPS_WASTE_*`` ones."""
    return IdlePolicy(
        settings.idle_threshold_ratio,
        settings.idle_window_seconds,
        settings.idle_max_gap_seconds,
        settings.idle_grace_seconds,
        settings.idle_partition_thresholds,
        settings.reason_policy,
    )


NoRollup = Annotated[
    bool,
    typer.Option(
        "--no-rollup",
        help="Leave the ledger hours this changes pending (dirty) for the next rollup, instead of rolling them "
        "up now: for bulk loads, rolled up once at the end (gpu-finops rollup).",
    ),
]
"""The ``--no-rollup`` option of the commands that change what the ledger is built from."""


def tsdb_telemetry(settings: Settings) -> TsdbTelemetry | None:
    """The TSDB the ledger and idle detection read telemetry from (``FINOPS_TELEMETRY_SOURCE=tsdb``, at
    ``FINOPS_TSDB_URL``, its series selected by ``FINOPS_PROMETHEUS_SELECTOR`` and read at
    ``FINOPS_PROMETHEUS_STEP_SECONDS``), else None. FinopsError for a selector that is not label matchers in braces."""
    if settings.telemetry_source != "tsdb":
        return None
    try:
        options = PullOptions(step_seconds=settings.prometheus_step_seconds, selector=settings.prometheus_selector)
    except ValueError as exc:
        raise FinopsError(f"FINOPS_PROMETHEUS_SELECTOR: {exc}") from exc
    return TsdbTelemetry(PrometheusClient(settings.tsdb_url), options, settings.tsdb_discovery_lookback_seconds)


def roll_up(settings: Settings) -> None:
    """The scheduler's rollup (:func:`finops.service.scheduler.run_rollup`: dirty ledger hours rebuilt, their idle
    episodes re-judged, budget and anomaly events recorded; from the TSDB with ``FINOPS_TELEMETRY_SOURCE=tsdb``) run
    once; prints what it did in one line, then on
    stderr, per model without a price, its GPU-hours and how to price them."""
    sessions, pricing, policy = open_sessions(settings), load_pricing(settings), idle_policy(settings)
    built, episodes = run_rollup(sessions, pricing, policy, tsdb=tsdb_telemetry(settings))
    typer.echo(
        f"rollup: {built.hours} ledger hours rebuilt: {built.priced_gpu_hours:,.2f} GPU-hours priced, "
        f"{built.unpriced_gpu_hours:,.2f} unpriced; {episodes} idle episodes"
    )
    for model, seconds in built.unpriced_gpu_seconds.items():
        typer.echo(f"unpriced: {seconds / 3600:,.2f} GPU-hours of {model}: {unpriced_fix(model)}", err=True)


def roll_up_unless(skip: bool, settings: Settings) -> None:
    """After a command changed the ledger's inputs: :func:`roll_up` and print its line, or with ``skip``
    (``--no-rollup``) say that the hours stay pending."""
    if skip:
        typer.echo("rollup: skipped (--no-rollup); the ledger hours changed stay pending until the next rollup")
    else:
        roll_up(settings)


def finish_import(skipped: Iterable[str], summary: str, no_rollup: bool, settings: Settings) -> None:
    """The end of every import command: each refused record on stderr (``skipped <message>``), the one-line
    ``summary``, the rollup (:func:`roll_up_unless`), then exit code 1 when anything was refused."""
    refused = 0
    for message in skipped:
        typer.echo(f"skipped {message}", err=True)
        refused += 1
    typer.echo(summary)
    roll_up_unless(no_rollup, settings)
    if refused:
        raise typer.Exit(INCOMPLETE)


def instant(text: str, option: str) -> datetime:
    """ISO 8601 ``text`` as an aware UTC datetime (UTC when it has no offset); BadParameter naming ``option``."""
    try:
        return parse_utc(text)
    except ValueError as exc:
        raise typer.BadParameter(f"{text!r} is not an ISO 8601 time", param_hint=option) from exc


def bound(text: str, option: str, *, end: bool) -> datetime:
    """``text`` as one bound of a period (:func:`finops.timeutil.period_bound`: a month or a day names all of it);
    BadParameter naming ``option``."""
    try:
        return period_bound(text, end=end)
    except ValueError as exc:
        raise typer.BadParameter(
            f"{text!r} is neither a month (2026-11), a day (2026-11-24) nor an ISO 8601 time", param_hint=option
        ) from exc


PeriodStart = Annotated[
    str | None,
    typer.Option(
        help="Period start: a month (2026-11), a day (2026-11-24) or an ISO 8601 time (UTC if no offset). "
        "Default: the first of this month."
    ),
]
"""The ``--start`` of the commands that report on a period (:func:`period`)."""

PeriodEnd = Annotated[
    str | None,
    typer.Option(
        help="Period end: a month or a day (the period runs through it) or an ISO 8601 time (exclusive). Default: now."
    ),
]
"""The ``--end`` of the commands that report on a period (:func:`period`)."""


def period(start: str | None, end: str | None) -> tuple[datetime, datetime]:
    """The period [start, end) of ``--start`` and ``--end`` (:func:`bound`), month to date by default;
    BadParameter when it is empty."""
    now = utc_now()
    begin = bound(start, "--start", end=False) if start is not None else month_start(now)
    finish = bound(end, "--end", end=True) if end is not None else now
    if finish <= begin:
        raise typer.BadParameter(f"must be after --start ({begin:%Y-%m-%d %H:%M:%S} UTC)", param_hint="--end")
    return begin, finish


def read_bytes(file: str | Path) -> bytes:
    """The bytes of ``file`` (``-``: standard input); FinopsError ``<file>: <reason>`` if it cannot be read."""
    if str(file) == STDIN:
        return sys.stdin.buffer.read()
    try:
        return Path(file).read_bytes()
    except OSError as exc:
        raise FinopsError(f"{file}: {exc.strerror or exc}") from exc


def read_text(file: Path) -> str:
    """The UTF-8 text of ``file``; FinopsError ``<file>: <reason>`` if it cannot be read or decoded."""
    try:
        return file.read_text(encoding="utf-8")
    except OSError as exc:
        raise FinopsError(f"{file}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise FinopsError(f"{file}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc


def open_text(file: str) -> TextIO:
    """``file`` opened for reading UTF-8 text (``-``: standard input); FinopsError ``<file>: <reason>`` if it
    cannot be opened."""
    if file == STDIN:
        return sys.stdin
    try:
        return open(file, encoding="utf-8")
    except OSError as exc:
        raise FinopsError(f"{file}: {exc.strerror or exc}") from exc
