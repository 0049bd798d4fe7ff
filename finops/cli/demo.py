"""``gpu-finops demo``: replay a GPU-cluster week (the real Helios trace, else a synthetic one) through
collector → service → ledger → report → dashboard."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from finops.cli.context import load_settings
from finops.demo.runner import DemoOptions, run_demo
from finops.service.dashboard_server import require_dashboard_extra

app = typer.Typer()


@app.command()
def demo(
    trace: Annotated[
        str | None,
        typer.Option(
            help="helios:DIR replays the real Helios week in DIR "
            "(default: the one in FINOPS_SHARED_DATA, else a synthetic week)."
        ),
    ] = None,
    headless: Annotated[bool, typer.Option(help="Exit after the report instead of serving the dashboard.")] = False,
    report_json: Annotated[Path | None, typer.Option(help="Write the team report as JSON here.")] = None,
    database_url: Annotated[
        str | None, typer.Option(help="Database for the demo (default: a fresh SQLite file in the data dir).")
    ] = None,
    dashboard_port: Annotated[int, typer.Option(help="Port of the dashboard after the report.")] = 8501,
    minutes: Annotated[int | None, typer.Option(min=1, help="Replay only the first N minutes of the week.")] = None,
) -> None:
    """Replay a GPU-cluster week through collector → service → ledger → report → dashboard.

    Exit code 2 for a Helios folder that is missing or cannot be replayed (the message names the file), and without
    --headless when the dashboard extra is not installed (the message names it)."""
    if not headless:
        require_dashboard_extra("demo")
    settings = load_settings()
    if trace is not None and not trace.startswith("helios:"):
        raise typer.BadParameter("expected helios:DIR", param_hint="--trace")
    if trace is not None:
        trace_dir = Path(trace.removeprefix("helios:"))
        if not trace_dir.is_dir():
            raise typer.BadParameter(
                f"{trace_dir} is not a folder. The Helios week comes with the shared data folder "
                "(HeliosArtifact's Earth cluster, CC-BY-4.0: docs/demo.md); without --trace the demo replays it "
                "from FINOPS_SHARED_DATA when there, else a synthetic week",
                param_hint="--trace",
            )
        helios_dir: Path | None = trace_dir
    else:
        default = settings.shared_data / "helios-earth-vc-allocation"
        helios_dir = default if default.is_dir() else None
        if helios_dir is None:
            typer.echo(f"note: no Helios trace at {default} (FINOPS_SHARED_DATA); using the synthetic week")
    options = DemoOptions(
        helios_dir=helios_dir,
        headless=headless,
        report_json=report_json,
        database_url=database_url or settings.demo_database_url,
        dashboard_port=dashboard_port,
        price_catalog=settings.price_catalog,
        pricing_model=settings.pricing_model,
        shared_data=settings.shared_data,
        work_dir=settings.data_dir,
        minutes=minutes,
    )
    raise typer.Exit(run_demo(options))
