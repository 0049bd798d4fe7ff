"""``gpu-finops nodes …``: the node inventory, each node's GPU model and Slurm partitions (import it from
``scontrol show node --oneliner``, set a node's or a partition's model by hand, list it).

The inventory gives the model of GPUs no collector has reported (the placeholders a job import creates); a
collector's reading of a GPU always wins. Models are price catalog models (the catalog in force): a GRES type or
NVML name is resolved through the catalog's keys, aliases and match expressions
(:meth:`finops.pricing.catalog.PriceCatalog.model_for`). ``import`` and ``set-model`` roll up the ledger hours whose
GPUs changed model before they return, as the job imports do (:func:`finops.cli.context.roll_up_unless`;
``--no-rollup``: leave them pending).
"""

from __future__ import annotations

from typing import Annotated

import typer

from finops.cli.context import (
    STDIN,
    NoRollup,
    finish_import,
    load_pricing,
    load_settings,
    open_sessions,
    open_text,
    roll_up_unless,
)
from finops.jobs.inventory import import_nodes, node_summaries, set_model
from finops.pricing.store import catalog_in_force

app = typer.Typer(
    name="nodes", help="The node inventory: each node's GPU model and Slurm partitions.", no_args_is_help=True
)


@app.command("import")
def nodes_import(
    file: Annotated[str, typer.Argument(help="scontrol show node --oneliner output, or - for standard input.")],
    no_rollup: NoRollup = False,
) -> None:
    """Record each node's GPU model and partitions from `scontrol show node --oneliner` output (Slurm's scontrol(1):
    one node per line, `NodeName=… Gres=gpu:a100:4(S:0-1) … Partitions=gpu,debug …`).

    The GRES type is resolved to a price catalog model; a type that names none is kept as it is and the node is
    named with the command that fixes it. Bad lines are named with their line number, the rest is imported, and
    the exit code is then 1. The ledger hours of GPUs whose model changed are then rolled up (repriced), also when
    lines were bad (--no-rollup: at the next rollup).
    """
    settings = load_settings()
    with open_sessions(settings).begin() as session:
        catalog = catalog_in_force(session, load_pricing(settings).catalog)
        with open_text(file) as handle:
            result = import_nodes(session, handle, source="<stdin>" if file == STDIN else file, resolve=catalog.resolve)
    for problem in result.unresolved:
        typer.echo(f"model unknown: {problem}", err=True)
    finish_import(
        (error.message for error in result.errors),
        f"{result.nodes} nodes; {result.models_set} GPU models set, {result.gpus_changed} GPUs repriced; "
        f"{len(result.unresolved)} nodes without a catalog model; {len(result.errors)} bad lines",
        no_rollup,
        settings,
    )


@app.command("set-model")
def nodes_set_model(
    args: Annotated[list[str], typer.Argument(help="NODE MODEL, or MODEL with --partition.", metavar="[NODE] MODEL")],
    partition: Annotated[str | None, typer.Option(help="Set the model of every node in this partition.")] = None,
    no_rollup: NoRollup = False,
) -> None:
    """Set the GPU model of NODE, or of every node in --partition, to MODEL: a price catalog model key or a name
    that resolves to one (`h100`, `NVIDIA A100-SXM4-80GB`). Placeholder GPUs of nodes no collector has reported
    take it, and their ledger hours are rolled up (repriced) before the command returns (--no-rollup: at the
    next rollup)."""
    if partition is None and len(args) != 2:
        raise typer.BadParameter("give NODE MODEL, or --partition P MODEL", param_hint="[NODE] MODEL")
    if partition is not None and len(args) != 1:
        raise typer.BadParameter("with --partition give only MODEL", param_hint="[NODE] MODEL")
    node, model = (None, args[0]) if partition is not None else (args[0], args[1])
    settings = load_settings()
    with open_sessions(settings).begin() as session:
        catalog = catalog_in_force(session, load_pricing(settings).catalog)
        key, hostnames, changed = set_model(
            session, model, resolve=catalog.resolve, choices=sorted(catalog.models), node=node, partition=partition
        )
    typer.echo(f"{', '.join(hostnames)}: GPU model {key}; {changed} GPUs repriced")
    roll_up_unless(no_rollup, settings)


@app.command("list")
def nodes_list() -> None:
    """Every node: the model its GPUs are priced as (a collector's reading, else the inventory's, else the jobs'),
    the inventory model, the models collectors reported, placeholder GPUs and partitions."""
    with open_sessions(load_settings())() as session:
        nodes = node_summaries(session)
    lines = [f"{'node':<24} {'model':<20} {'inventory':<20} {'reported':<24} {'placeholders':>12} partitions"]
    lines += [
        f"{n.hostname:<24} {n.model or '-':<20} {n.inventory_model or '-':<20} {', '.join(n.reported) or '-':<24} "
        f"{n.placeholders:>12} {n.partitions or '-'}"
        for n in nodes
    ]
    typer.echo("\n".join(lines))


gpu_app = typer.Typer(name="gpu", help="One GPU slot of a node (node and NVML index).", no_args_is_help=True)
app.add_typer(gpu_app)


@gpu_app.command("replace")
def nodes_gpu_replace(
    node: Annotated[str, typer.Argument(help="The node's hostname, as its collector names it.")],
    index: Annotated[int, typer.Argument(help="The GPU's NVML index on the node.")],
) -> None:
    """Free GPU INDEX of NODE for a new board after a hardware swap: the slot forgets its UUID, and the next batch
    of NODE describing that index registers its UUID, model and memory in it (ingest refuses a batch that
    re-registers a slot under another UUID or model until this is run). The slot keeps its history: its samples
    and ledger hours stay on it."""
    from sqlalchemy import select, update

    from finops.db.models import Gpu, Node

    with open_sessions(load_settings()).begin() as session:
        slot = select(Gpu.id, Gpu.uuid).join(Node).where((Node.hostname == node) & (Gpu.gpu_index == index))
        found = session.execute(slot).one_or_none()
        if found is None:
            raise typer.BadParameter(f"node {node} has no GPU {index}", param_hint="NODE INDEX")
        session.execute(update(Gpu).where(Gpu.id == found.id).values(uuid=None))
    typer.echo(
        f"{node} GPU {index}: {found.uuid or 'no UUID'} released; the next batch of {node} registers the new board"
    )
