"""Reading a price catalog's YAML within bounds: its size, its nesting, its nodes (aliases counted as what they
stand for) and its models, so that no catalog, from a file or ``PUT /api/v1/prices``, makes the reader run for
minutes, take gigabytes or overflow a stack.

Parsed by libyaml (PyYAML's ``CSafeLoader``, a safe loader: no arbitrary objects) with every float read as an
exact :class:`~decimal.Decimal` and a duplicate mapping key an error. Before anything is built, one pass over the
parser's events (:func:`check_shape`) checks the nesting and the node count: a document nested deeper than
:data:`MAX_DEPTH` (PyYAML's composer recurses once per level, and in C) or of more than :data:`MAX_NODES` nodes once
its aliases are expanded (``&a [*b, *b, …]``: the "billion laughs") is refused without being composed.
"""

from __future__ import annotations

from collections.abc import Hashable
from decimal import Decimal, InvalidOperation
from typing import Any

import yaml

MAX_CHARACTERS = 2**20
"""Longest catalog text: 1 Mi characters, 33 times the packaged catalog (about 31,000, 20 models)."""
MAX_DEPTH = 32
"""Deepest nesting of mappings and sequences: the packaged catalog's is 7 (``models``, a model, ``prices``, a row,
``sources``, a source)."""
MAX_NODES = 200_000
"""Most nodes (scalars, mappings, sequences), aliases counted as the nodes they stand for: the packaged catalog has
about 55 per model, so 1,000 models of its kind take about 55,000."""
MAX_MODELS = 1_000
"""Most GPU models in a catalog: a site prices the models it runs, tens; the packaged catalog has 20."""


class CatalogTooLarge(ValueError):
    """Catalog YAML past one of the bounds (size, nesting, nodes, models); the message names it."""


class _CatalogLoader(yaml.CSafeLoader):
    """libyaml's safe loading with decimals for floats and an error on duplicate mapping keys."""


def _decimal(loader: _CatalogLoader, node: yaml.ScalarNode) -> Decimal | str:
    text = str(loader.construct_scalar(node))
    try:
        return Decimal(text.replace("_", ""))
    except InvalidOperation:
        return text  # e.g. ".inf": left as text, so validation names the field


def _mapping(loader: _CatalogLoader, node: yaml.MappingNode) -> dict[Hashable, Any]:
    keys: set[Hashable] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in keys:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        keys.add(key)
    return loader.construct_mapping(node)


_CatalogLoader.add_constructor("tag:yaml.org,2002:float", _decimal)
_CatalogLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def check_shape(text: str) -> None:
    """Raise :class:`CatalogTooLarge` when ``text`` (YAML) nests deeper than :data:`MAX_DEPTH` or holds more than
    :data:`MAX_NODES` nodes with its aliases expanded, naming the line; ``yaml.YAMLError`` when it does not parse.
    One pass over libyaml's events, stopped at the first bound passed: no node is built."""
    open_nodes: list[list[Any]] = []  # per open collection: [anchor, nodes in it so far, itself included]
    sizes: dict[str, int] = {}  # anchor -> nodes of the node it names
    total = 0
    for event in yaml.parse(text, Loader=yaml.CSafeLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            open_nodes.append([event.anchor, 1])
            if len(open_nodes) > MAX_DEPTH:
                raise CatalogTooLarge(_at(event, f"nested deeper than {MAX_DEPTH} levels"))
            total += 1
            continue
        if isinstance(event, yaml.CollectionEndEvent):  # its nodes were counted as they came
            anchor, size = open_nodes.pop()
        elif isinstance(event, yaml.ScalarEvent):
            anchor, size = event.anchor, 1
            total += 1
        elif isinstance(event, yaml.AliasEvent):
            anchor, size = None, sizes.get(event.anchor or "", 1)  # an anchor still open (a cycle) counts once
            total += size
        else:
            continue
        if anchor is not None:
            sizes[anchor] = size
        if open_nodes:
            open_nodes[-1][1] += size
        if total > MAX_NODES:
            raise CatalogTooLarge(_at(event, f"more than {MAX_NODES} nodes (aliases counted as what they stand for)"))


def _at(event: yaml.Event, what: str) -> str:
    mark = event.start_mark
    return what if mark is None else f"{what} at line {mark.line + 1}"


def load(text: str) -> Any:
    """The Python value of catalog YAML ``text`` (decimals for floats) once it is within the bounds:
    :class:`CatalogTooLarge` for text longer than :data:`MAX_CHARACTERS`, a shape :func:`check_shape` refuses or
    ``models`` holding more than :data:`MAX_MODELS` entries; ``yaml.YAMLError`` (with ``problem_mark``) for YAML that
    does not parse or holds a duplicate key."""
    if len(text) > MAX_CHARACTERS:
        raise CatalogTooLarge(f"{len(text)} characters, more than the {MAX_CHARACTERS} a catalog may have")
    check_shape(text)
    data = yaml.load(text, Loader=_CatalogLoader)  # _CatalogLoader is a SafeLoader: no arbitrary objects
    models = data.get("models") if isinstance(data, dict) else None
    if isinstance(models, dict | list) and len(models) > MAX_MODELS:
        raise CatalogTooLarge(f"models: {len(models)} models, more than the {MAX_MODELS} a catalog may have")
    return data
