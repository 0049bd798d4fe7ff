"""Node rows and the model of their GPUs, read and created in chunks of bound parameters."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TypeVar

from sqlalchemy import select
from sqlalchemy.orm import Session

from finops.db.models import Gpu, Node

IN_CHUNK = 2000  # values per SQL IN list

T = TypeVar("T")


def ensure_nodes(session: Session, hostnames: Iterable[str]) -> dict[str, Node]:
    """The Node rows of ``hostnames``, created (and flushed) where missing; one query per 2000 names."""
    names = sorted(set(hostnames))
    nodes: dict[str, Node] = {}
    for chunk in in_chunks(names):
        nodes.update((node.hostname, node) for node in session.scalars(select(Node).where(Node.hostname.in_(chunk))))
    missing = [Node(hostname=name) for name in names if name not in nodes]
    if missing:
        session.add_all(missing)
        session.flush()
        nodes.update((node.hostname, node) for node in missing)
    return nodes


def effective_model(gpus: Iterable[tuple[bool, str]], inventory: str | None) -> str | None:
    """The model of a node's GPUs from its ``gpus`` (reported by a collector?, model) and its inventory model: the
    collector-reported GPUs' model when they are all one, else the inventory's, else the placeholders' when they
    are all one (``unknown`` aside), else None."""
    reported: set[str] = set()
    placeholders: set[str] = set()
    for is_reported, model in gpus:
        if model != "unknown":
            (reported if is_reported else placeholders).add(model)
    if len(reported) == 1:
        return reported.pop()
    if inventory:
        return inventory
    return placeholders.pop() if len(placeholders) == 1 else None


def node_models(session: Session, hostnames: Iterable[str]) -> dict[str, str | None]:
    """Per hostname, the model of its GPUs as :func:`effective_model` decides (collector, inventory, placeholders);
    one query per 2000 names."""
    names = sorted(set(hostnames))
    gpus: dict[str, list[tuple[bool, str]]] = {name: [] for name in names}
    inventory: dict[str, str | None] = {}
    for chunk in in_chunks(names):
        query = (
            select(Node.hostname, Node.gpu_model, Gpu.uuid.is_not(None), Gpu.model)
            .outerjoin(Gpu, Gpu.node_id == Node.id)
            .where(Node.hostname.in_(chunk))
        )
        for hostname, gpu_model, reported, model in session.execute(query.distinct()):
            inventory[hostname] = gpu_model
            if model is not None:
                gpus[hostname].append((bool(reported), model))
    return {name: effective_model(gpus[name], inventory.get(name)) for name in names}


def in_chunks(values: Sequence[T]) -> Iterator[list[T]]:
    """``values`` in lists of at most :data:`IN_CHUNK` (bound parameters per SQL IN list)."""
    for i in range(0, len(values), IN_CHUNK):
        yield list(values[i : i + IN_CHUNK])
