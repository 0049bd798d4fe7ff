"""``gpu-finops prices …``: the price catalog in force (list it, import a new one) and the pricing rules that
say which pricing model (on-demand, reserved, spot, on-prem) a node's GPUs are billed under. Commands that change
prices roll up the ledger hours they re-price before they return (``--no-rollup``: leave them pending). Changes are
audited as the OS user's (:mod:`finops.access.audit`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from finops.access import audit
from finops.cli.context import NoRollup, load_pricing, load_settings, open_sessions, read_text, roll_up_unless
from finops.pricing.catalog import OnPremRow, PricingModel
from finops.pricing.rules import delete_pricing_rule, list_pricing_rules, set_pricing_rule
from finops.pricing.store import catalog_in_force, import_catalog

app = typer.Typer(
    name="prices", help="The price catalog and which pricing model each node is billed under.", no_args_is_help=True
)

_NODE = typer.Option(help="A hostname.")
_PARTITION = typer.Option(help="A Slurm partition.")
_NODE_LABEL = typer.Option(help="A Kubernetes node label KEY=VALUE.")


@app.command("list")
def prices_list() -> None:
    """The catalog in force (newest import, else FINOPS_PRICE_CATALOG): one line per price row, currency per
    GPU-hour, on-prem rows computed from their parts; "(estimate)" after the source of a row resting on an estimate
    (a source marked ``estimate: true``); a model without price rows on one line saying it is unpriced."""
    settings = load_settings()
    with open_sessions(settings)() as session:
        catalog = catalog_in_force(session, load_pricing(settings).catalog)
    typer.echo(f"{'model':<18} {'pricing model':<13} {'from':<10} {catalog.currency + '/GPU-h':>10}  source")
    for key, model in sorted(catalog.models.items()):
        if not model.prices:
            typer.echo(f"{key:<18} {'-':<13} {'-':<10} {'unpriced':>10}  no price row in the catalog")
        for row in sorted(model.prices, key=lambda r: (r.pricing_model, r.effective_from)):
            rate = catalog.parts_of(row).total if isinstance(row, OnPremRow) else row.rate
            estimate = " (estimate)" if any(source.estimate for source in row.sources) else ""
            typer.echo(
                f"{key:<18} {row.pricing_model:<13} {row.effective_from} {rate:>10.4f}  {row.sources[0].url}{estimate}"
            )


@app.command("import")
def prices_import(
    file: Annotated[Path, typer.Argument(help="Price catalog YAML (format: finops/pricing/price_catalog.yaml).")],
    no_rollup: NoRollup = False,
) -> None:
    """Validate a catalog and put it in force; ledger hours it prices differently are rebuilt (now, or with
    --no-rollup on the next rollup). Exit code 2 for a file that cannot be read or is not a valid catalog (the
    message names the field)."""
    settings = load_settings()
    text = read_text(file)
    with open_sessions(settings).begin() as session:
        changed_from = import_catalog(
            session, text, str(file), load_pricing(settings).catalog, actor=audit.os_user_actor()
        )
    typer.echo(f"imported {file}; " + (f"ledger re-priced from {changed_from}" if changed_from else "no price changed"))
    if changed_from is not None:
        roll_up_unless(no_rollup, settings)


def _selector(node: str | None, partition: str | None, node_label: str | None) -> tuple[str, str, str]:
    """(selector, label key, value) of the one option given; BadParameter unless exactly one is."""
    chosen = [
        (name, value) for name, value in (("node", node), ("partition", partition), ("node_label", node_label)) if value
    ]
    if len(chosen) != 1:
        raise typer.BadParameter("give exactly one of --node, --partition, --node-label")
    selector, value = chosen[0]
    if selector != "node_label":
        return selector, "", value
    key, sep, label_value = value.partition("=")
    if not sep or not key:
        raise typer.BadParameter(f"{value!r} is not KEY=VALUE", param_hint="--node-label")
    return selector, key, label_value


@app.command("assign")
def prices_assign(
    pricing_model: Annotated[str, typer.Argument(help="on-demand, reserved, spot or on-prem.")],
    node: Annotated[str | None, _NODE] = None,
    partition: Annotated[str | None, _PARTITION] = None,
    node_label: Annotated[str | None, _NODE_LABEL] = None,
    no_rollup: NoRollup = False,
) -> None:
    """Bill the GPUs of a node, a partition's nodes or labelled nodes under PRICING_MODEL (the ledger is re-priced)."""
    try:
        model = PricingModel(pricing_model)
    except ValueError as exc:
        raise typer.BadParameter(f"must be one of {', '.join(PricingModel)}", param_hint="PRICING_MODEL") from exc
    selector, key, value = _selector(node, partition, node_label)
    settings = load_settings()
    with open_sessions(settings).begin() as session:
        set_pricing_rule(session, selector, key, value, model, actor=audit.os_user_actor())
    typer.echo(f"{selector} {key + '=' if key else ''}{value} → {model}")
    roll_up_unless(no_rollup, settings)


@app.command("unassign")
def prices_unassign(
    node: Annotated[str | None, _NODE] = None,
    partition: Annotated[str | None, _PARTITION] = None,
    node_label: Annotated[str | None, _NODE_LABEL] = None,
    no_rollup: NoRollup = False,
) -> None:
    """Remove a pricing rule: those nodes go back to FINOPS_PRICING_MODEL (the ledger is re-priced)."""
    selector, key, value = _selector(node, partition, node_label)
    settings = load_settings()
    with open_sessions(settings).begin() as session:
        delete_pricing_rule(session, selector, key, value, actor=audit.os_user_actor())
    typer.echo(f"{selector} {key + '=' if key else ''}{value} → default pricing model")
    roll_up_unless(no_rollup, settings)


@app.command("rules")
def prices_rules() -> None:
    """The pricing rules in resolution order (node, node label, partition)."""
    settings = load_settings()
    with open_sessions(settings)() as session:
        rules = list_pricing_rules(session)
    for rule in rules:
        typer.echo(f"{rule.selector:<10} {rule.key + '=' if rule.key else ''}{rule.value:<30} {rule.pricing_model}")
    typer.echo(f"(anything else: {settings.pricing_model})")
