"""``gpu-finops nodes …``: the node inventory, each node's GPU model and Slurm partitions (import it from
``scontrol show node --oneliner``, set a node's or a partition's model by hand, list it).

The inventory gives the model of GPUs no collector has reported (the placeholders a job import creates); a
collector's reading of a GPU always wins. Models are price catalog models (the catalog in force): a GRES type or
NVML name is resolved through the catalog's keys, aliases and match expressions
(:meth:`finops.pricing.catalog.PriceCatalog.model_for`). ``import`` and ``set-model`` roll up the ledger hours whose
GPUs changed model before they return, as the job imports do (:func:`finops.cli.context.roll_up_unless`;
``--no-rollup``: leave them pending).

``nodes token create|list|revoke``: the nodes' collector credentials (:mod:`finops.ingest.node_tokens`). A token is
printed once, on the last line of ``create``'s output, and only its hash is stored.

``set-model``, ``gpu replace`` and the token commands are audited as the OS user's (:mod:`finops.access.audit`);
``import`` is data from Slurm, as the job imports are, and is not.
"""

from __future__ import annotations

from typing import Annotated

import typer
from sqlalchemy import select, update

from finops.access import audit
from finops.access.tokens import parse_lifetime
from finops.cli.context import (
    STDIN,
    TOKEN_COLUMNS,
    NoRollup,
    finish_import,
    instant,
    load_pricing,
    load_settings,
    open_sessions,
    open_text,
    roll_up_unless,
    token_columns,
    utc_stamp,
)
from finops.db.models import Gpu, Node
from finops.ingest.node_tokens import create_token, list_tokens, revoke_token
from finops.jobs.compute_partitions import parse_modes
from finops.jobs.inventory import NodeSummary, import_nodes, node_summaries, set_model
from finops.pricing.store import catalog_in_force
from finops.timeutil import utc_now

app = typer.Typer(
    name="nodes", help="The node inventory: each node's GPU model and Slurm partitions.", no_args_is_help=True
)
token_app = typer.Typer(
    name="token",
    help="Per-node collector tokens: each admits only its node's batches. Several may be live at once (rotation).",
    no_args_is_help=True,
)
app.add_typer(token_app)


@app.command("import")
def nodes_import(
    file: Annotated[str, typer.Argument(help="scontrol show node --oneliner output, or - for standard input.")],
    cluster: Annotated[
        str | None,
        typer.Option(help="The cluster the listing is of (default: FINOPS_SACCT_CLUSTER); its nodes missing leave."),
    ] = None,
    at: Annotated[
        str | None,
        typer.Option(help="The instant the listing describes, ISO 8601 (naive: UTC); default: now."),
    ] = None,
    partial: Annotated[
        bool, typer.Option("--partial", help="The listing holds only some nodes: end no missing node's service.")
    ] = False,
    compute_partition: Annotated[
        list[str] | None,
        typer.Option(
            help="GRES_TYPE=MODE (mi300x=cpx): the type's GPUs are AMD compute partitions in MODE (dpx, tpx, qpx, "
            "cpx), each priced as its share of the GPU; for types that do not end in _MODE themselves. Repeatable."
        ),
    ] = None,
    no_rollup: NoRollup = False,
) -> None:
    """Record each node's GPUs, GPU model, partitions and state from `scontrol show node --oneliner` output
    (Slurm's scontrol(1): one node per line, `NodeName=… Gres=gpu:a100:4(S:0-1) … Partitions=gpu,debug …
    State=IDLE …`).

    Each node gets the GPUs its Gres names, in service from the import's time (--at) while its State is not FUTURE
    (nor a powered-down cloud node); a drained or down node's GPUs stay in service, listed as unavailable. A node
    of the cluster that an earlier import listed and this one lacks leaves service (not with --partial, nor when
    lines were bad). The GRES type is resolved to a price catalog model; a type that names none is kept as it is
    and the node is named with the command that fixes it. A type ending in _dpx, _tpx, _qpx or _cpx (mi300x_cpx), or
    named by --compute-partition, gives AMD compute partitions: Gres=gpu:mi300x_cpx:64 is 64 GPUs, each 1/8 of an
    MI300X. Bad lines are named with their line number, the rest is
    imported, and the exit code is then 1. The changed ledger hours are then rolled up, also when lines were bad
    (--no-rollup: at the next rollup).
    """
    settings = load_settings()
    now = utc_now()
    when = instant(at, "--at") if at is not None else now
    if when > now:
        raise typer.BadParameter(f"{at} is in the future", param_hint="--at")
    try:
        modes = parse_modes(compute_partition or [])
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--compute-partition") from exc
    with open_sessions(settings).begin() as session:
        catalog = catalog_in_force(session, load_pricing(settings).catalog)
        with open_text(file) as handle:
            result = import_nodes(
                session,
                handle,
                source="<stdin>" if file == STDIN else file,
                resolve=catalog.resolve,
                at=when,
                cluster=cluster or settings.sacct_cluster,
                partial=partial,
                modes=modes,
            )
    for problem in result.unresolved:
        typer.echo(f"model unknown: {problem}", err=True)
    capacity = result.capacity
    for hostname in capacity.gone:
        typer.echo(f"gone from the inventory, its GPUs out of service: {hostname}", err=True)
    if result.errors and not partial:
        typer.echo("bad lines: no node was taken for gone from the inventory", err=True)
    finish_import(
        (error.message for error in result.errors),
        f"{result.nodes} nodes; {capacity.gpus_created} GPUs added; {capacity.entered} nodes entered service, "
        f"{len(capacity.left)} left it, {len(capacity.gone)} gone; {len(capacity.unavailable)} unavailable "
        f"(drained, down: in service){_listed(capacity.unavailable)}; {result.models_set} GPU models set, "
        f"{result.gpus_changed} GPUs repriced; {len(result.unresolved)} nodes without a catalog model; "
        f"{len(result.errors)} bad lines",
        no_rollup,
        settings,
    )


def _listed(names: list[str], most: int = 5) -> str:
    """`` (a, b, c, …)`` for a message: the first ``most`` names."""
    if not names:
        return ""
    return f" ({', '.join(names[:most])}{', …' if len(names) > most else ''})"


@app.command("set-model")
def nodes_set_model(
    args: Annotated[list[str], typer.Argument(help="NODE MODEL, or MODEL with --partition.", metavar="[NODE] MODEL")],
    partition: Annotated[str | None, typer.Option(help="Set the model of every node in this partition.")] = None,
    no_rollup: NoRollup = False,
) -> None:
    """Set the GPU model of NODE, or of every node in --partition, to MODEL: a price catalog model key or a name
    that resolves to one (`h100`, `NVIDIA A100-SXM4-80GB`), or an AMD compute partition type of one (`mi300x_cpx`:
    each GPU 1/8 of an MI300X). Placeholder GPUs of nodes no collector has reported
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
            session,
            model,
            resolve=catalog.resolve,
            choices=sorted(catalog.models),
            node=node,
            partition=partition,
            actor=audit.os_user_actor(),
        )
    typer.echo(f"{', '.join(hostnames)}: GPU model {key}; {changed} GPUs repriced")
    roll_up_unless(no_rollup, settings)


@app.command("list")
def nodes_list() -> None:
    """Every node: the model its GPUs are priced as (a collector's reading, else the inventory's, else the jobs'),
    the inventory model, the models collectors reported, placeholder GPUs, partitions, and its inventory state
    since when (a drained or down node's GPUs are in service but cannot run jobs)."""
    with open_sessions(load_settings())() as session:
        nodes = node_summaries(session)
    lines = [
        f"{'node':<24} {'model':<20} {'inventory':<20} {'reported':<24} {'placeholders':>12} {'partitions':<16} state"
    ]
    lines += [
        f"{n.hostname:<24} {n.model or '-':<20} {n.inventory_model or '-':<20} {', '.join(n.reported) or '-':<24} "
        f"{n.placeholders:>12} {n.partitions or '-':<16} {_state(n)}"
        for n in nodes
    ]
    typer.echo("\n".join(lines))


def _state(node: NodeSummary) -> str:
    """A node's inventory state for ``nodes list``: ``IDLE+DRAIN since 2026-11-02T10:00Z (disk)``; ``-`` when no
    inventory lists it."""
    if node.state is None:
        return "-" if node.state_since is None else f"not in the inventory since {utc_stamp(node.state_since)}"
    reason = f" ({node.state_reason})" if node.state_reason else ""
    return f"{node.state} since {utc_stamp(node.state_since)}{reason}"


@token_app.command("create")
def token_create(
    node: Annotated[str, typer.Argument(help="The node's hostname, as its collector names it in its batches.")],
    expires: Annotated[
        str | None, typer.Option(help="Valid for this long (90d, 12h, 2w; s m h d w); default: until revoked.")
    ] = None,
) -> None:
    """Make a token for NODE's collector and print it once, alone on the last line (only its SHA-256 is stored:
    it cannot be shown again). NODE may be one that has sent no batch yet (a new node); that is said on stderr.
    Give the token to the collector in its --token-file."""
    expires_in = parse_lifetime(expires) if expires is not None else None
    now = utc_now()
    with open_sessions(load_settings()).begin() as session:
        row, token = create_token(session, node, now, expires_in, actor=audit.os_user_actor())
        known = session.scalar(select(Node.id).where(Node.hostname == row.node)) is not None
    if not known:
        typer.echo(f"note: node {row.node!r} has sent no batch yet; check the name if it is not a new node", err=True)
    typer.echo(f"id       {row.id}\nnode     {row.node}\nexpires  {utc_stamp(row.expires_at, 'never')}")
    typer.echo(token)


@token_app.command("list")
def token_list(node: Annotated[str | None, typer.Option(help="Only this node's tokens.")] = None) -> None:
    """Every node token (never its secret): id, node, state (live, expired, revoked), created, expires, last used
    (to the minute) and revoked, in UTC."""
    now = utc_now()
    with open_sessions(load_settings())() as session:
        rows = list_tokens(session, node)
    lines = [f"{'id':<16} {'node':<24} {TOKEN_COLUMNS}"]
    lines += [f"{row.id:<16} {row.node:<24} {token_columns(row, now)}" for row in rows]
    typer.echo("\n".join(lines))


@token_app.command("revoke")
def token_revoke(token_id: Annotated[str, typer.Argument(metavar="ID", help="The token's id (from list).")]) -> None:
    """Revoke a node token now: the service refuses it (401) from its next request on. Revoking a revoked token
    changes nothing."""
    with open_sessions(load_settings()).begin() as session:
        row, revoked = revoke_token(session, token_id, utc_now(), actor=audit.os_user_actor())
    if revoked:
        typer.echo(f"revoked node token {row.id} of node {row.node}")
    else:
        typer.echo(f"node token {row.id} of node {row.node} was already revoked at {utc_stamp(row.revoked_at)}")


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
    and ledger hours stay on it. Audited as ``gpu.replace``: the slot's UUID before and after."""
    with open_sessions(load_settings()).begin() as session:
        slot = select(Gpu.id, Gpu.uuid).join(Node).where((Node.hostname == node) & (Gpu.gpu_index == index))
        found = session.execute(slot).one_or_none()
        if found is None:
            raise typer.BadParameter(f"node {node} has no GPU {index}", param_hint="NODE INDEX")
        session.execute(update(Gpu).where(Gpu.id == found.id).values(uuid=None))
        before = {"node": node, "index": index, "uuid": found.uuid}
        audit.record(
            session, audit.os_user_actor(), "gpu.replace", f"node {node} GPU {index}", before, {**before, "uuid": None}
        )
    typer.echo(
        f"{node} GPU {index}: {found.uuid or 'no UUID'} released; the next batch of {node} registers the new board"
    )
