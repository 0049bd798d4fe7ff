"""The node inventory: each node's GPU model and Slurm partitions, from ``scontrol show node --oneliner`` or set by
hand, for the GPUs no collector has reported.

``scontrol show node --oneliner`` (Slurm documentation, scontrol(1): "--oneliner: Print information one line
per record") prints one node per line as space-separated ``Key=Value`` fields, for example::

    NodeName=gpu-a-01 Arch=x86_64 CoresPerSocket=32 CPUAlloc=0 ... Gres=gpu:a100:4(S:0-1) NodeAddr=gpu-a-01 ...
    OS=Linux 5.14.0-362.el9.x86_64 #1 SMP ... Partitions=gpu,debug ... Reason=disk [root@2026-11-02T10:00:00]

A value may hold spaces (``OS``, ``Reason``): a field runs until the next `` Key=``. ``Gres`` lists the node's
generic resources comma-separated as ``name[:type][:count][(S:sockets)]``, ``(null)`` for none (Slurm
documentation, gres.conf(5)): ``gpu:a100:4(S:0-1)``, untyped ``gpu:4``, several kinds ``gpu:h100:8,shard:h100:64``,
MIG devices ``gpu:1g.10gb:7`` (``a100_1g.5gb``: a MIG profile of an A100). Only ``gpu`` counts here; a MIG type
names no board model unless it carries one before the profile (``a100_1g.5gb`` -> ``a100``). A type naming an AMD
compute partition mode (``gpu:mi300x_cpx:64``, or ``mi300x`` with ``--compute-partition mi300x=cpx``) gives the
node 64 GPUs, each its board's partition (``MI300X (CPX partition 1/8)``, priced at 1/8 of an MI300X;
:mod:`finops.jobs.compute_partitions`).

A node's model is the price catalog model its GPU type resolves to, or the raw type when it resolves to none
(kept, never dropped: :class:`InventoryResult` names such nodes and the command that fixes them). Which model a
node's GPUs are priced as: a collector's reading of a GPU (its ``gpus`` row) wins; the inventory model gives the
model of the node's placeholder GPUs (:mod:`finops.jobs.placement`); with neither, a job's typed GRES does.
Wherever an inventory model changes the model of a GPU, the ledger hours of that GPU since it entered service are
marked dirty, so the next rollup reprices them.

Each node's GPUs and their service periods come from its ``Gres`` and ``State`` (:mod:`finops.jobs.capacity`).

A model set by hand (:func:`set_model`) is written to the audit log (:mod:`finops.access.audit`); an inventory
imported from ``scontrol`` is data, as the job imports are, and is not.

This package may not import the price catalog: callers pass ``resolve`` (a GPU name to a catalog model key or
None; :meth:`finops.pricing.catalog.PriceCatalog.resolve`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from collector.contract.partitions import partition_name
from finops.access import audit
from finops.db.hours import HourMarks
from finops.db.models import Gpu, Node
from finops.errors import FinopsError
from finops.jobs.capacity import (
    CapacityResult,
    close_service,
    end_gone,
    ensure_gpus,
    in_service,
    open_service,
    physical_gpus,
    set_state,
    unavailable,
)
from finops.jobs.compute_partitions import gres_partition, with_modes
from finops.jobs.mig import gres_mig_type
from finops.jobs.nodes import effective_model, ensure_nodes

Resolver = Callable[[str], str | None]
"""A GPU name (GRES type, NVML name, catalog key) to the catalog model key it names, or None."""

_FIELD = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_]*)=")
_COUNT = re.compile(r"^([0-9]+)$")


class InventoryError(FinopsError, ValueError):
    """A node or partition that is not in the inventory, or a model that names no catalog model."""


@dataclass(frozen=True, slots=True)
class NodeLineError:
    """A line of scontrol output that could not be read: 1-based ``line_number``, ``message``
    (``<source>:<line>: <what is wrong>``), the ``line``."""

    line_number: int
    message: str
    line: str


@dataclass(frozen=True, slots=True)
class ScontrolNode:
    """One node of ``scontrol show node --oneliner``: ``gpus`` as (GRES type or None when untyped, count),
    MIG devices included; ``partitions`` in scontrol's order; ``state`` and ``reason``: its State and Reason as
    printed (None when absent; Reason ``none`` too)."""

    hostname: str
    gpus: tuple[tuple[str | None, int], ...]
    partitions: tuple[str, ...]
    state: str | None = None
    reason: str | None = None

    @property
    def gpu_types(self) -> list[str]:
        """The distinct board types of the node's GPUs (a MIG type's parent when it names one), sorted."""
        types = set()
        for gres_type, _ in self.gpus:
            if gres_type is None:
                continue
            mig = gres_mig_type(gres_type)
            if mig is None:
                types.add(gres_type)
            elif mig[0]:
                types.add(mig[0])
        return sorted(types)


@dataclass
class ParsedNodes:
    """The nodes read and the lines that could not be."""

    nodes: list[ScontrolNode] = field(default_factory=list)
    errors: list[NodeLineError] = field(default_factory=list)


def parse_scontrol_nodes(lines: Iterable[str], *, source: str, first_line: int = 1) -> ParsedNodes:
    """Read ``scontrol show node --oneliner`` output (format in the module docstring). Blank lines are skipped;
    a line without ``NodeName`` or with an unreadable ``Gres`` is an error naming its line number (the first of
    ``lines`` is ``first_line``), and the rest is read."""
    parsed = ParsedNodes()
    for number, raw in enumerate(lines, start=first_line):
        line = raw.rstrip("\r\n")
        if not line.strip():
            continue
        try:
            parsed.nodes.append(parse_node_line(line))
        except ValueError as exc:
            parsed.errors.append(NodeLineError(number, f"{source}:{number}: {exc}", line))
    return parsed


def parse_node_line(line: str) -> ScontrolNode:
    """One ``--oneliner`` line; ValueError saying what is wrong."""
    fields = _fields(line)
    hostname = fields.get("NodeName", "")
    if not hostname or " " in hostname:
        raise ValueError("no NodeName= field: not a line of scontrol show node --oneliner")
    gres = fields.get("Gres", "")
    partitions = fields.get("Partitions", "")
    reason = fields.get("Reason") or None
    return ScontrolNode(
        hostname=hostname,
        gpus=tuple(_gpu_gres(gres)),
        partitions=tuple(p for p in partitions.split(",") if p and p != "(null)"),
        state=fields.get("State") or None,
        reason=None if reason in (None, "none", "(null)") else reason[:255],
    )


def _fields(line: str) -> dict[str, str]:
    """``Key=Value`` fields of a line; a value runs to the next `` Key=`` (values may hold spaces)."""
    starts = list(_FIELD.finditer(line))
    if not starts or line[: starts[0].start()].strip():
        return {}
    fields: dict[str, str] = {}
    for i, match in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(line)
        fields.setdefault(match.group(1), line[match.end() : end].strip())
    return fields


def _split_top(text: str) -> list[str]:
    """Split on commas outside parentheses (``gpu:a100:4(S:0,1),shard:8``)."""
    items, depth, current = [], 0, ""
    for char in text:
        depth += (char == "(") - (char == ")")
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    items.append(current)
    return [item.strip() for item in items if item.strip()]


def _gpu_gres(gres: str) -> list[tuple[str | None, int]]:
    """The ``gpu`` items of a Gres value as (type or None, count)."""
    if gres in ("", "(null)"):
        return []
    gpus: list[tuple[str | None, int]] = []
    for item in _split_top(gres):
        parts = re.sub(r"\(.*\)$", "", item).split(":")  # socket affinity (S:0-1) off
        if parts[0] != "gpu":
            continue
        count_match = _COUNT.match(parts[-1]) if len(parts) > 1 else None
        if count_match:
            count, names = int(count_match.group(1)), parts[1:-1]
        else:
            count, names = 1, parts[1:]  # gres.conf: a GRES without a count is one
        if len(names) > 1 or (names and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.+-]*", names[0])):
            raise ValueError(f"field Gres: cannot read {item!r} (expected gpu[:type][:count])")
        gpus.append((names[0] if names else None, count))
    return gpus


@dataclass
class InventoryResult:
    """What an inventory import did: nodes read, models set or changed, GPUs whose model changed, bad lines, the
    nodes whose GPU model is not a catalog model (raw type kept), untyped or mixed, each with what to do, and what
    it did to capacity (:class:`finops.jobs.capacity.CapacityResult`)."""

    nodes: int = 0
    models_set: int = 0
    gpus_changed: int = 0
    errors: list[NodeLineError] = field(default_factory=list)
    unresolved: list[str] = field(default_factory=list)
    capacity: CapacityResult = field(default_factory=CapacityResult)


_FIX = "gpu-finops nodes set-model {} MODEL (or add the type to the aliases of a model in your price catalog)"


MAX_NODES_PER_IMPORT = 100_000
"""Most node lines one inventory import reads (the largest GPU clusters have tens of thousands of nodes). The line
past it is named as an error saying the rest of the input was not read; the nodes before it are imported."""
IMPORT_CHUNK = 5_000
"""Node lines stored per round: an import holds one round's nodes in memory, not the whole input."""


def import_nodes(
    session: Session,
    lines: Iterable[str],
    *,
    source: str,
    resolve: Resolver,
    at: datetime,
    cluster: str = "default",
    partial: bool = False,
    modes: Mapping[str, str] | None = None,
) -> InventoryResult:
    """Record each node of ``scontrol show node --oneliner`` output as of ``at`` (aware UTC, the instant the listing
    describes), in the caller's transaction: its partitions and GPU model (module docstring), its GPUs from its
    ``Gres``, their service period from its ``State``, its state (:mod:`finops.jobs.capacity`). An untyped or mixed
    node keeps the model it has; a type that resolves to no catalog model is stored raw unless the node already has
    a model (one set by hand stays).

    The lines are read and stored :data:`IMPORT_CHUNK` at a time, at most :data:`MAX_NODES_PER_IMPORT` of them
    (blank lines aside); the line past that is an error and the rest is not read.

    ``cluster`` names the inventory: the nodes of ``cluster`` that an earlier import listed and this one does not
    leave service at ``at``, unless ``partial`` (the listing holds only some nodes) or a line was bad or not read
    (its node cannot be told apart from a gone one).

    ``modes``: GRES type (lower case) -> the compute partition mode its GPUs are in
    (:func:`finops.jobs.compute_partitions.parse_modes`), for types that do not say it themselves."""
    result = InventoryResult()
    marks = HourMarks()
    listed: set[str] = set()
    chunk: list[str] = []
    first = records = 0
    for number, raw in enumerate(lines, start=1):
        if raw.strip():
            if records == MAX_NODES_PER_IMPORT:
                message = (
                    f"{source}:{number}: more than {MAX_NODES_PER_IMPORT} nodes in one import: this line and the "
                    f"rest were not read; import them in parts of at most {MAX_NODES_PER_IMPORT} lines"
                )
                result.errors.append(NodeLineError(number, message, raw.rstrip("\r\n")[:200]))
                break
            records += 1
        if not chunk:
            first = number
        chunk.append(raw)
        if len(chunk) == IMPORT_CHUNK:
            listed |= _import_chunk(session, chunk, first, source, resolve, at, cluster, result, marks, modes or {})
            chunk = []
    if chunk:
        listed |= _import_chunk(session, chunk, first, source, resolve, at, cluster, result, marks, modes or {})
    if not partial and not result.errors:
        result.capacity.gone = end_gone(session, cluster, listed, at, marks)
    marks.mark(session)
    session.flush()
    return result


def _import_chunk(
    session: Session,
    lines: list[str],
    first_line: int,
    source: str,
    resolve: Resolver,
    at: datetime,
    cluster: str,
    result: InventoryResult,
    marks: HourMarks,
    modes: Mapping[str, str],
) -> set[str]:
    """Store one round of node lines (the first is line ``first_line`` of the input) into ``result`` and ``marks``
    (:func:`import_nodes`); returns the hostnames it listed."""
    parsed = parse_scontrol_nodes(lines, source=source, first_line=first_line)
    result.errors += parsed.errors
    nodes = ensure_nodes(session, (n.hostname for n in parsed.nodes))
    for record in parsed.nodes:
        if modes:
            record = replace(record, gpus=with_modes(record.gpus, modes))
        node = nodes[record.hostname]
        result.nodes += 1
        partitions = ",".join(record.partitions) or None
        if node.partitions != partitions:
            node.partitions = partitions
        _set_inventory_model(session, node, record, resolve, result, marks)
        _set_capacity(session, node, record, cluster, at, result.capacity, marks)
    return set(nodes)


def _set_inventory_model(
    session: Session, node: Node, record: ScontrolNode, resolve: Resolver, result: InventoryResult, marks: HourMarks
) -> None:
    """Set ``node``'s inventory model from its GRES type (:func:`import_nodes`), or say in ``result`` why not."""
    types = record.gpu_types
    if len(types) > 1:
        result.unresolved.append(
            f"{record.hostname}: several GPU types ({', '.join(types)}); model left as {node.gpu_model!r}: "
            + _FIX.format(record.hostname)
        )
        return
    if not types:
        if record.gpus and node.gpu_model is None:
            result.unresolved.append(f"{record.hostname}: untyped GPUs, model unknown: " + _FIX.format(record.hostname))
        return
    model = gres_model(types[0], resolve)
    if model is None:
        result.unresolved.append(
            f"{record.hostname}: GPU type {types[0]!r} names no price catalog model: " + _FIX.format(record.hostname)
        )
        if node.gpu_model is not None:
            return
        model = types[0]
    if node.gpu_model != model:
        result.models_set += 1
        result.gpus_changed += set_node_model(session, node, model, marks)


def _set_capacity(
    session: Session,
    node: Node,
    record: ScontrolNode,
    cluster: str,
    at: datetime,
    result: CapacityResult,
    marks: HourMarks,
) -> None:
    """Give ``node`` the GPUs its GRES names, and open or end their service by its State
    (:mod:`finops.jobs.capacity`)."""
    set_state(node, cluster, record.state, record.reason, at)
    count = physical_gpus(record.gpus, node.gpu_model)
    gpu_ids, created = ensure_gpus(session, node, count, node.gpu_model or "unknown", at)
    result.gpus_created += created
    if not in_service(record.state):
        if close_service(session, gpu_ids, at, marks):
            result.left.append(node.hostname)
        return
    if open_service(session, gpu_ids, at, marks):
        result.entered += 1
    if unavailable(record.state):
        result.unavailable.append(f"{node.hostname} ({record.state})")


def set_node_model(session: Session, node: Node, model: str, marks: HourMarks) -> int:
    """Set ``node``'s inventory model and give it to its placeholder GPUs (those no collector has reported) when no
    collector has reported any of its GPUs; gather the changed GPUs' hours since they entered service in
    ``marks``. Returns how many GPUs changed model."""
    node.gpu_model = model
    gpus = session.execute(select(Gpu.id, Gpu.uuid, Gpu.model, Gpu.in_service_from).where(Gpu.node_id == node.id)).all()
    if any(gpu.uuid is not None for gpu in gpus):
        return 0  # a collector's reading wins over the inventory
    changed = [gpu for gpu in gpus if gpu.model != model]
    if changed:
        session.execute(update(Gpu).where(Gpu.id.in_([gpu.id for gpu in changed])).values(model=model))
        marks.add_run(min(gpu.in_service_from for gpu in changed), None)
    return len(changed)


def gres_model(gres_type: str, resolve: Resolver) -> str | None:
    """The model a GRES type (or a model name) gives a node: the catalog key it names, or for a compute partition
    type the partition of the key its board names (``mi300x_cpx`` -> ``MI300X (CPX partition 1/8)``,
    :mod:`finops.jobs.compute_partitions`); None when it names no catalog model."""
    partition = gres_partition(gres_type)
    if partition is None:
        return resolve(gres_type)
    key = resolve(partition[0])
    return None if key is None else partition_name(key, partition[1])


def resolve_model(model: str, resolve: Resolver, choices: Sequence[str]) -> str:
    """The model ``model`` names (:func:`gres_model`: a catalog key or an alias, or a compute partition type);
    InventoryError naming the ``choices`` else."""
    key = gres_model(model, resolve)
    if key is None:
        raise InventoryError(f"GPU model {model!r} is not a price catalog model; choose one of: {', '.join(choices)}")
    return key


def set_model(
    session: Session,
    model: str,
    *,
    resolve: Resolver,
    choices: Sequence[str],
    node: str | None = None,
    partition: str | None = None,
    actor: str,
) -> tuple[str, list[str], int]:
    """Set the inventory model of ``node``, or of every node in ``partition`` (its inventory partitions, else the
    partition of its latest job), to the catalog model ``model`` names, marking the changed GPUs' hours dirty.

    Returns (catalog key, hostnames set, GPUs whose model changed). Audited as ``node.set_model`` by ``actor``:
    before ``{"models": {hostname: inventory model or None}}``, after the same and ``gpus_changed``. InventoryError
    for a model that names no catalog model (the message lists ``choices``), an unknown node, or a partition with
    no node; nothing is written then.
    """  # fmt: skip
    key = resolve_model(model, resolve, choices)
    if (node is None) == (partition is None):
        raise InventoryError("give a node or --partition, not both")
    if node is not None:
        found = session.scalars(select(Node).where(Node.hostname == node)).one_or_none()
        if found is None:
            raise InventoryError(f"no node {node!r}: import the inventory first (gpu-finops nodes import FILE)")
        targets = [found]
    else:
        assert partition is not None
        targets = [
            n
            for n in session.scalars(select(Node).order_by(Node.hostname))
            if partition in (n.partitions or "").split(",") or (not n.partitions and n.partition == partition)
        ]
        if not targets:
            raise InventoryError(f"no node in partition {partition!r} (gpu-finops nodes list shows the partitions)")
    before = {"models": {target.hostname: target.gpu_model for target in targets}}
    marks = HourMarks()
    changed = sum(set_node_model(session, target, key, marks) for target in targets)
    marks.mark(session)
    session.flush()
    after = {"models": {target.hostname: key for target in targets}, "gpus_changed": changed}
    subject = f"node {node}" if node is not None else f"partition {partition}"
    audit.record(session, actor, "node.set_model", subject, before, after)
    return key, [target.hostname for target in targets], changed


@dataclass(frozen=True, slots=True)
class NodeSummary:
    """A node as ``gpu-finops nodes list`` shows it: inventory model and partitions, the models its collector
    reported, its placeholder GPUs and the model they are priced as (placement's rule, see the module docstring),
    and its inventory State, Reason and since when (None: no inventory lists it)."""

    hostname: str
    inventory_model: str | None
    partitions: str | None
    reported: tuple[str, ...]
    placeholders: int
    model: str | None
    state: str | None = None
    state_reason: str | None = None
    state_since: datetime | None = None


def node_summaries(session: Session) -> list[NodeSummary]:
    """Every node, by hostname; two queries."""
    gpus: dict[int, list[tuple[bool, str]]] = {}
    for node_id, uuid, model in session.execute(select(Gpu.node_id, Gpu.uuid, Gpu.model)):
        gpus.setdefault(node_id, []).append((uuid is not None, model))
    summaries = []
    for node in session.scalars(select(Node).order_by(Node.hostname)):
        held = gpus.get(node.id, [])
        summaries.append(
            NodeSummary(
                hostname=node.hostname,
                inventory_model=node.gpu_model,
                partitions=node.partitions,
                reported=tuple(sorted({model for reported, model in held if reported})),
                placeholders=sum(1 for reported, _ in held if not reported),
                model=effective_model(held, node.gpu_model),
                state=node.state,
                state_reason=node.state_reason,
                state_since=node.state_since,
            )
        )
    return summaries
