"""``gpu-finops commitments``: the reserved GPU quantity that costs least per model, from the GPUs jobs held over the
last days, and owned GPUs against renting them (:mod:`finops.savings.commitments`), as a table, JSON or CSV."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
import typer

from finops.cli.context import load_pricing, load_settings, open_sessions
from finops.csv_cells import dict_rows_csv
from finops.pricing.store import catalog_in_force
from finops.savings.commitments import (
    DEFAULT_DAYS,
    MAX_DAYS,
    MAX_QUANTITY,
    SPOT_NOTE,
    CommitmentReport,
    commitment_report,
)
from finops.timeutil import utc_now

app = typer.Typer()

FORMATS = ("table", "json", "csv")
_PLANS = (("best", "best"), ("spot", "spot_overflow"), ("what_if", "what_if"))
_PLAN_FIELDS = ("quantity", "cost", "saving_per_month", "utilisation")
CSV_COLUMNS = (
    "section",
    "model",
    "gpu_names",
    "hours",
    "gpu_hours",
    "mean_gpus",
    "peak_gpus",
    "on_demand_rate",
    "reserved_rate",
    "spot_rate",
    "on_demand_cost",
    *(f"{prefix}_{name}" for prefix, _ in _PLANS for name in _PLAN_FIELDS),
    "capacity_gpu_hours",
    "allocated_gpu_hours",
    "used_gpu_hours",
    "capacity_cost",
    "cost_per_allocated_gpu_hour",
    "cost_per_used_gpu_hour",
    "allocated_ratio",
    "used_ratio",
    "reason",
    "fix",
)
"""The CSV's header: one row per rented model (``section`` commitment), owned model (``on-prem``) and model left out
(its section, with ``reason`` and ``fix``); a field that does not apply is empty."""


@app.command()
def commitments(
    days: Annotated[
        int, typer.Option(min=1, max=MAX_DAYS, help="Whole days of ledger hours before the current hour.")
    ] = DEFAULT_DAYS,
    model: Annotated[
        str | None, typer.Option(help="Only this GPU model (a catalogue model or any name it covers).")
    ] = None,
    quantity: Annotated[
        int | None,
        typer.Option(min=0, max=MAX_QUANTITY, help="What if this many GPUs of each model were committed."),
    ] = None,
    output_format: Annotated[str, typer.Option("--format", help="table, json or csv.")] = "table",
) -> None:
    """The reserved (committed) GPUs that cost least per GPU model, from the GPUs jobs held in each hour of the last
    --days days, at the price catalogue's reserved and on-demand rates in force now: the quantity, its cost against
    holding every GPU-hour on demand, the saving per 730-hour month and the share of the commitment jobs would have
    used; the same with the overflow on spot where the catalogue has a spot rate (spot GPUs are interruptible: an
    option for restartable work only); with --quantity, the same figures for that many committed GPUs. Owned
    (on-prem) GPUs: their capacity cost per GPU-hour jobs held, and per busy GPU-hour, against the on-demand rate of
    the same model. A model that cannot be analysed is listed with the reason and the fix
    (finops/savings/commitments.py says how each figure is computed)."""
    if output_format not in FORMATS:
        raise typer.BadParameter(f"must be one of {', '.join(FORMATS)}", param_hint="--format")
    settings = load_settings()
    with open_sessions(settings)() as session:
        catalog = catalog_in_force(session, load_pricing(settings).catalog)
        report = commitment_report(session, catalog, utc_now(), days, model=model, quantity=quantity)
    pending = report.ledger_hours_pending
    if pending:
        typer.echo(
            f"note: {pending} ledger hour{'s' if pending != 1 else ''} of the window "
            f"{'are' if pending != 1 else 'is'} pending (not rolled up yet): these figures may change; run "
            "gpu-finops rollup for current ones",
            err=True,
        )
    if output_format == "json":
        typer.echo(orjson.dumps(report.as_dict(), option=orjson.OPT_INDENT_2).decode())
    elif output_format == "csv":
        typer.echo(commitments_csv(report), nl=False)
    else:
        typer.echo(commitments_table(report))


def _csv_rows(report: CommitmentReport) -> list[dict[str, Any]]:
    """The report's JSON (:meth:`CommitmentReport.as_dict`) flattened to :data:`CSV_COLUMNS`."""
    data = report.as_dict()
    rows: list[dict[str, Any]] = []
    for item in data["commitments"]:
        row = {"section": "commitment", **item, "gpu_names": ";".join(item["gpu_names"])}
        for prefix, key in _PLANS:
            plan = item[key] or {}
            row.update({f"{prefix}_{name}": plan.get(name) for name in _PLAN_FIELDS})
        rows.append(row)
    rows.extend({"section": "on-prem", **item, "gpu_names": ";".join(item["gpu_names"])} for item in data["on_prem"])
    rows.extend(data["not_analysed"])
    return rows


def commitments_csv(report: CommitmentReport) -> str:
    """The report as CSV with a header line (:data:`CSV_COLUMNS`; null as an empty field)."""
    return dict_rows_csv(CSV_COLUMNS, _csv_rows(report))


def _money(text: str | None) -> str:
    return "-" if text is None else f"{float(text):,.2f}"


def _share(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.1%}"


def _columns(headers: list[str], lines: list[list[str]]) -> list[str]:
    """``lines`` under ``headers``, the first column left-aligned, the others right-aligned."""
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(headers)]
    return [
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(line, widths, strict=True))
        )
        for line in [headers, *lines]
    ]


def commitments_table(report: CommitmentReport) -> str:
    """The report as text: a line saying what the figures are, a table of the rented models (with, under each, its
    spot and "what if" plans), a table of the owned models, and a line per model left out with its fix."""
    data = report.as_dict()
    currency = data["currency"]
    out = [
        f"GPUs held by jobs, {report.start:%Y-%m-%d %H:%M} to {report.end:%Y-%m-%d %H:%M} UTC "
        f"({data['days']} day{'s' if data['days'] != 1 else ''}); "
        f"{currency} rates in force at {report.end:%Y-%m-%d %H:%M} UTC; savings per {data['hours_per_month']}-hour "
        "month"
    ]
    if not data["commitments"] and not data["on_prem"] and not data["not_analysed"]:
        return "\n".join([*out, "No ledger hours in this window."])
    if data["commitments"]:
        headers = ["model", "hours", "mean GPUs", "peak", "on-demand/h", "reserved/h", "commit", "utilisation"]
        headers += ["all on-demand", "committed", "saving/month"]
        lines = [
            [
                c["model"], str(c["hours"]), f"{c['mean_gpus']:,.1f}", str(c["peak_gpus"]), c["on_demand_rate"],
                c["reserved_rate"], str(c["best"]["quantity"]), _share(c["best"]["utilisation"]),
                _money(c["on_demand_cost"]), _money(c["best"]["cost"]), _money(c["best"]["saving_per_month"]),
            ]
            for c in data["commitments"]
        ]  # fmt: skip
        out += ["", "Rented GPUs: the commitment that costs least, overflow on demand", *_columns(headers, lines)]
        for c in data["commitments"]:
            for label, plan in (
                (f"overflow on spot at {c['spot_rate']}/h", c["spot_overflow"]),
                (f"what if {data['quantity']} committed", c["what_if"]),
            ):
                if plan is not None:
                    out.append(
                        f"  {c['model']}, {label}: commit {plan['quantity']}, cost {_money(plan['cost'])}, "
                        f"saving/month {_money(plan['saving_per_month'])}, utilisation {_share(plan['utilisation'])}"
                    )
        if any(c["spot_overflow"] for c in data["commitments"]):
            out.append(f"  note: {SPOT_NOTE}")
    if data["on_prem"]:
        headers = ["model", "held GPU-h", "busy GPU-h", "capacity cost", "per held GPU-h", "per busy GPU-h"]
        headers += ["on-demand/h", "held ratio", "busy ratio"]
        lines = [
            [
                o["model"], f"{o['allocated_gpu_hours']:,.1f}", f"{o['used_gpu_hours']:,.1f}",
                _money(o["capacity_cost"]), _money(o["cost_per_allocated_gpu_hour"]),
                _money(o["cost_per_used_gpu_hour"]), o["on_demand_rate"],
                "-" if o["allocated_ratio"] is None else f"{o['allocated_ratio']:.2f}",
                "-" if o["used_ratio"] is None else f"{o['used_ratio']:.2f}",
            ]
            for o in data["on_prem"]
        ]  # fmt: skip
        out += ["", "Owned GPUs (on-prem) against renting the held hours on demand", *_columns(headers, lines)]
    if data["not_analysed"]:
        out.append("")
    for n in data["not_analysed"]:
        out.append(f"not analysed ({n['section']}): {n['model']}: {n['reason']}; {n['fix']}")
    return "\n".join(out)
