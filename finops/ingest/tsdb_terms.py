"""What the TSDB metering asks (:class:`finops.ingest.tsdb_metering.TsdbMeter`): a segment of an hour asked for some
GPUs (:class:`Term`), and one value over it (:class:`Ask`), a PromQL expression of the segment's readings.

A segment [a, b) is selected by :func:`~finops.ingest.promql_select.window` (``[<b − a>s] @ <b − 0.001>``): the
readings of [a, b) to the millisecond. The expressions (Prometheus documentation "Query functions"; MetricsQL
answers them the same): ``count_over_time``, ``sum_over_time``, ``max_over_time`` and ``min_over_time`` of the
segment's readings (:data:`COUNT`, :data:`SUM`, :data:`MAX`, :data:`MIN`), the last reading within
:data:`ENERGY_GAP_SECONDS` before the segment (:func:`last_before`) and a counter's resets from that long before it to
its end (:func:`resets`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from finops.ingest.promql_select import window
from finops.timeutil import HOUR

ENERGY_GAP_SECONDS = HOUR
"""As the direct path's :data:`finops.ledger.metering.ENERGY_LOOKBACK_SECONDS`: an increment from a reading more than an
hour older is left out."""


@dataclass(frozen=True, slots=True)
class Term:
    """A segment [a, b) (epoch seconds) asked for the GPUs of ``uuids``, or for every GPU when it is empty."""

    a: int
    b: int
    uuids: tuple[str, ...] = ()


Expression = Callable[[str, int, int], str]
"""A metering query of one term: (series selector, a, b) → PromQL."""


@dataclass(frozen=True, slots=True)
class Ask:
    """One value asked of the TSDB: ``expression`` of ``dcgm_field``'s series over ``term``."""

    dcgm_field: str
    expression: Expression
    term: Term


Answers = dict[Ask, dict[int, float]]
"""Per :class:`Ask`, its value per known GPU (``gpus.id``) that has a series in it."""


def _over_time(aggregation: str) -> Expression:
    """``<aggregation>_over_time`` of the segment's readings (:func:`~finops.ingest.promql_select.window`)."""
    return lambda selector, a, b: f"{aggregation}_over_time({selector}{window(a, b)})"


def last_before(selector: str, a: int, _: int) -> str:
    """The last reading within :data:`ENERGY_GAP_SECONDS` before the segment."""
    return f"last_over_time({selector}{window(a - ENERGY_GAP_SECONDS, a)})"


def resets(selector: str, a: int, b: int) -> str:
    """The counter's resets from :data:`ENERGY_GAP_SECONDS` before the segment to its end."""
    return f"resets({selector}{window(a - ENERGY_GAP_SECONDS, b)})"


COUNT, SUM, MAX, MIN = (_over_time(aggregation) for aggregation in ("count", "sum", "max", "min"))


def narrowed(terms: Sequence[Term], uuids: set[str]) -> list[Term]:
    """``terms`` for the GPUs of ``uuids`` only: a term naming GPUs keeps those of ``uuids`` (none: left out); the
    term for every GPU stays, unless ``uuids`` is empty."""
    if not uuids:
        return []
    kept = []
    for term in terms:
        named = tuple(uuid for uuid in term.uuids if uuid in uuids)
        if not term.uuids or named:
            kept.append(Term(term.a, term.b, named))
    return kept
