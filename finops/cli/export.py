"""``gpu-finops export …``: the ledger in standard cost formats (FinOps FOCUS 1.2 as CSV or Parquet)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from finops.cli.context import bound, load_pricing, load_settings, open_sessions
from finops.export.focus import FocusAccount, FocusExportError, check_period, export_focus, output_format
from finops.pricing.store import pricing_in_force

app = typer.Typer(name="export", help="Export the ledger in standard cost formats.", no_args_is_help=True)


@app.command("focus")
def export_focus_command(
    start: Annotated[
        str, typer.Option(help="First hour: a month (2026-11), a day or an ISO 8601 whole hour (UTC if no offset).")
    ],
    end: Annotated[
        str, typer.Option(help="End: a month or a day (through its end) or an ISO 8601 whole hour (exclusive).")
    ],
    output: Annotated[Path, typer.Option("--output", "-o", help="FILE.csv or FILE.parquet to write.")],
    provider: Annotated[
        str, typer.Option(help="ProviderName, PublisherName and InvoiceIssuerName: who runs the GPUs.")
    ] = "GPU cluster",
    billing_account: Annotated[str, typer.Option(help="BillingAccountId and BillingAccountName.")] = "gpu-cluster",
    region: Annotated[str | None, typer.Option(help="RegionId and RegionName (default: null).")] = None,
) -> None:
    """FinOps FOCUS 1.2 cost and usage rows for ledger hours [start, end): one per GPU, hour and holder,
    unallocated capacity included, so the BilledCost adds up to the ledger's allocated cost.

    Exit code 2 when the file cannot be written or a ledger hour has no price in the catalog (nothing is written)."""
    try:
        output_format(output)
    except FocusExportError as exc:
        raise typer.BadParameter(str(exc), param_hint="--output/-o") from exc
    begin, finish = bound(start, "--start", end=False), bound(end, "--end", end=True)
    try:
        check_period(begin, finish)
    except FocusExportError as exc:
        hint = "--start" if str(exc).startswith("start") else "--end"
        raise typer.BadParameter(str(exc), param_hint=hint) from exc
    settings = load_settings()
    account = FocusAccount(provider=provider, billing_account=billing_account, region=region)
    with open_sessions(settings)() as session:
        done = export_focus(session, begin, finish, pricing_in_force(session, load_pricing(settings)), output, account)
    total = f"{done.billed_cost:f} {done.currency}" if done.currency else "0"
    typer.echo(f"{done.rows} FOCUS 1.2 rows written to {output}; BilledCost total {total}")
