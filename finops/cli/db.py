"""``gpu-finops db …``: the database schema (Alembic migrations) and the retention of raw GPU samples."""

from __future__ import annotations

from typing import Annotated

import typer

from finops.cli.context import load_settings, open_engine, open_sessions
from finops.db.engine import current_revision, head_revision, upgrade
from finops.ingest.partitions import prune_samples
from finops.timeutil import utc_now

app = typer.Typer(name="db", help="Database schema (Alembic migrations).", no_args_is_help=True)


@app.command("upgrade")
def db_upgrade() -> None:
    """Apply every migration not yet applied (running it again changes nothing)."""
    engine = open_engine(load_settings(), migrated=False)
    upgrade(engine)
    typer.echo(f"database at migration {current_revision(engine)}")


@app.command("prune-samples")
def db_prune_samples(
    retention_days: Annotated[
        int | None, typer.Option(min=1, help="Days of samples to keep (default: FINOPS_SAMPLE_RETENTION_DAYS).")
    ] = None,
) -> None:
    """Drop raw GPU samples older than the retention (whole days; hours awaiting a ledger rebuild keep theirs).

    PostgreSQL drops whole day partitions of gpu_samples; SQLite deletes the rows. The ledger is kept.
    """
    settings = load_settings()
    days = retention_days if retention_days is not None else settings.sample_retention_days
    with open_sessions(settings).begin() as session:
        pruned = prune_samples(session, days, utc_now())
    if pruned.rows is None:
        typer.echo(f"samples before {pruned.before.isoformat()} removed: {len(pruned.partitions)} day partitions")
    else:
        typer.echo(f"samples before {pruned.before.isoformat()} removed: {pruned.rows} rows")
    for name in pruned.partitions:
        typer.echo(f"  dropped {name}")


@app.command("current")
def db_current() -> None:
    """Print the migration the database is at."""
    engine = open_engine(load_settings(), migrated=False)
    typer.echo(f"at {current_revision(engine) or 'none'}, newest {head_revision()}")
