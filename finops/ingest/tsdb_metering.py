"""The ledger's metering read from a Prometheus-compatible TSDB by PromQL.

For fleets whose raw readings stay in VictoriaMetrics, Prometheus, Mimir or Thanos (dcgm-exporter or the collector
scraped by it, or remote-writing to it), the service stores no raw rows: before a rollup rebuilds some hours,
:class:`TsdbMeter` asks the TSDB, per GPU and segment of each hour, what the direct path sums from ``gpu_samples``
(:func:`finops.ledger.sql.meter`), and writes it to ``tsdb_gpu_metering`` (:class:`finops.db.models.TsdbGpuMetering`),
which the rollup then meters from.

Segments. A GPU-hour [h, h + 1 h) (clipped at the rollup's ``until``) is cut at the GPU's entry into service and at
every start and end of an allocation of the GPU, so that each holding of the hour is a union of whole segments.

Terms. An hour is asked as terms, one per segment: the whole hour (clipped), for every GPU at once (no UUID matcher:
most GPU-hours are not cut), and each segment cut inside the hour for the GPUs cut there only (a matcher on their
UUID label, :func:`uuid_matcher`, in groups of at most half a query: :func:`uuid_groups`). Per value below, an
hour's terms are tagged with their index (``label_replace`` into :data:`SEGMENT_LABEL`) and joined by ``or`` into
as few instant queries of at most :data:`MAX_QUERY_CHARS` characters as they fit in (:func:`packed`), each
evaluated at its latest segment end, every term at its own ``@`` instant. So the series the TSDB reads and answers
grow with the GPUs and their segments, and the queries with the text that names them, not with GPUs × bounds.

Queries (PromQL, Prometheus documentation "Query functions"; MetricsQL answers them the same), for a segment
[a, b) evaluated with the ``@`` modifier at ``b − 1 ms`` over a range of ``b − a``: a window that holds the
readings of [a, b) to the millisecond (the TSDBs' resolution) where ranges are open on the left (Prometheus 3,
VictoriaMetrics), and also a reading stamped at ``a − 1 ms`` exactly where they are closed (Prometheus 2). A reading
thus counts in the second its time falls in, fraction dropped, as the database stores it:

- utilisation: ``count_over_time`` and ``sum_over_time`` of the utilisation field (× its scale to a ratio);
- memory: ``max_over_time`` of ``DCGM_FI_DEV_FB_USED`` (MiB → bytes);
- energy (``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``, a counter in mJ → J): the ledger's rule sums the increments
  between consecutive readings that end in [a, b). For a counter without a reset that is the last value in
  [a, b) (``max_over_time``) less the last one before a within an hour (``last_over_time`` over [a − 1 h, a)), or,
  without one, less the first in [a, b) (``min_over_time``). PromQL's ``increase`` is not used: it extrapolates
  to the window's edges. Where ``resets`` over [a − 1 h, b) is not 0, the counter's raw readings of that span are
  read (an instant query of a range selector naming the GPUs affected, per segment) and the increments summed here
  as the direct path sums them, a reset counting the value after it.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from itertools import pairwise

from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session

from collector.contract.dcgm_fields import FIELDS
from finops.db.models import Allocation, Gpu, TsdbGpuMetering
from finops.ingest.prometheus import PrometheusClient, RangeSeries, promql_string, selector_matchers
from finops.ingest.prometheus_pull import UTILIZATION_FIELDS, PullOptions
from finops.timeutil import HOUR, from_epoch, to_epoch

ENERGY_FIELD = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
MEMORY_FIELD = "DCGM_FI_DEV_FB_USED"
ENERGY_GAP_SECONDS = HOUR
"""As the direct path's :data:`finops.ledger.sql.ENERGY_LOOKBACK_SECONDS`: an increment from a reading more than an
hour older is left out."""
MAX_QUERY_CHARS = 4096
"""Most characters of one PromQL query the metering packs (see the module documentation; a single term longer than
that is sent alone). Queries go in the URL of a GET: 4 KiB of PromQL stays, URL-encoded, within the 8 KiB request
line that proxies commonly accept (nginx's ``large_client_header_buffers``), and well within VictoriaMetrics'
``-search.maxQueryLen`` (16 KiB by default)."""
SEGMENT_LABEL = "finops_segment"
"""The label a packed query's terms are told apart by (``label_replace``)."""
_REGEX_SPECIAL = re.compile(r"[\\.+*?()|\[\]{}^$]")


def window(a: int, b: int) -> str:
    """The range and ``@`` modifier selecting the readings of [a, b) (epoch seconds) to the millisecond:
    ``[<b − a>s] @ <b − 0.001>`` (see the module documentation)."""
    return f"[{b - a}s] @ {b - 1}.999"


def raw_readings(client: PrometheusClient, selector: str, a: int, b: int) -> list[RangeSeries]:
    """The raw samples of [a, b) (epoch seconds) of ``selector``'s series (each series' in time order, at their
    own times, to the millisecond): an instant query of ``selector`` and :func:`window`, evaluated at the ``@``
    instant ``b − 1 ms``. The instant matters: VictoriaMetrics (1.79) ends such a range at the query's time and
    ignores ``@``, Prometheus honours ``@``."""
    return client.samples(f"{selector}{window(a, b)}", from_epoch(b) - timedelta(milliseconds=1))


def uuid_matcher(options: PullOptions, uuids: Sequence[str]) -> str:
    """The matcher of some GPUs' series by their UUID label: ``<UUID label>="<uuid>"`` for one,
    ``<UUID label>=~"<uuid>|<uuid>|…"`` (each regex-escaped) for several. ValueError when ``uuids`` is empty."""
    if not uuids:
        raise ValueError("uuids: at least one GPU UUID expected")
    if len(uuids) == 1:
        return f"{options.labels.uuid}={promql_string(uuids[0])}"
    return f"{options.labels.uuid}=~{promql_string('|'.join(map(regex_literal, uuids)))}"


def regex_literal(text: str) -> str:
    """``text`` as an RE2 regular expression (PromQL's ``=~``) matching itself: its metacharacters escaped."""
    return _REGEX_SPECIAL.sub(r"\\\g<0>", text)


def gpu_selector(options: PullOptions, dcgm_field: str, uuids: Sequence[str]) -> str:
    """``dcgm_field``'s series of some GPUs: ``options``' selector and :func:`uuid_matcher`."""
    matchers = (selector_matchers(options.selector), uuid_matcher(options, uuids))
    return f"{dcgm_field}{{{', '.join(filter(None, matchers))}}}"


def packed(sizes: Sequence[int], budget: int) -> list[list[int]]:
    """The indexes of ``sizes`` in consecutive groups whose sizes add up to at most ``budget`` (an index whose size
    alone is larger in a group of its own)."""
    groups: list[list[int]] = []
    used = budget
    for index, size in enumerate(sizes):
        if used + size > budget:
            groups.append([])
            used = 0
        groups[-1].append(index)
        used += size
    return groups


def uuid_groups(uuids: Sequence[str], budget: int = MAX_QUERY_CHARS // 2) -> list[list[str]]:
    """``uuids`` in consecutive groups whose :func:`uuid_matcher` regex takes at most ``budget`` characters (a UUID
    longer than that alone in its group), so that a query naming one group stays under :data:`MAX_QUERY_CHARS`."""
    sizes = [len(promql_string(regex_literal(uuid))) - 1 for uuid in uuids]  # escaped, quotes less one, with its |
    return [[uuids[index] for index in group] for group in packed(sizes, budget)]


def counter_increase(points: Iterable[tuple[float, float]], a: int) -> float:
    """Σ of a counter's increments ending at or after ``a`` (epoch seconds): between consecutive ``points``
    (epoch seconds, value; in time order) at most :data:`ENERGY_GAP_SECONDS` apart; a value below the previous
    one is a reset, and counts itself."""
    total = 0.0
    previous: tuple[float, float] | None = None
    for ts, value in points:
        if previous is not None and ts >= a and ts - previous[0] <= ENERGY_GAP_SECONDS:
            total += value if value < previous[1] else value - previous[1]
        previous = (ts, value)
    return total


@dataclass(slots=True)
class _Segment:
    samples: int = 0
    utilization_sum: float = 0.0
    energy_joules: float = 0.0
    memory_max_bytes: int | None = None
    seen: bool = False


@dataclass(frozen=True, slots=True)
class _Term:
    """A segment [a, b) (epoch seconds) asked for the GPUs of ``uuids``, or for every GPU when it is empty."""

    a: int
    b: int
    uuids: tuple[str, ...] = ()


Expression = Callable[[str, int, int], str]
"""A metering query of one term: (series selector, a, b) → PromQL."""


@dataclass(frozen=True, slots=True)
class TsdbMeter:
    """Meters hours from the TSDB at ``client`` into ``tsdb_gpu_metering``; a :data:`finops.ledger.rollup.Meter`.

    ``options``: the series' selector and label names and the utilisation field (the first of
    ``options.utilization_fields``), as for the Prometheus pull. GPUs are matched by their NVML UUID (dcgm-exporter's
    ``UUID`` label) to the GPUs the service knows (from job placements or the inventory); series of other GPUs are
    ignored.
    """

    client: PrometheusClient
    options: PullOptions = field(default_factory=PullOptions)

    def __call__(self, session: Session, hours: Sequence[int], until: int) -> None:
        self.meter_hours(session, hours, until)

    def meter_hours(self, session: Session, hours: Sequence[int], until: int) -> int:
        """Replace the segments of ``hours`` (epoch starts) up to ``until`` in ``tsdb_gpu_metering`` by those the
        TSDB answers; returns how many were written. Raises :class:`finops.ingest.prometheus.PrometheusError` when
        a query fails (nothing is written then: the caller's transaction is rolled back)."""
        if not hours:
            return 0
        first, last = min(hours), max(hours) + HOUR
        gpus = {
            uuid: (gpu_id, to_epoch(entered))
            for gpu_id, uuid, entered in session.execute(select(Gpu.id, Gpu.uuid, Gpu.in_service_from))
            if uuid is not None
        }
        cuts: dict[int, set[int]] = defaultdict(set)
        for gpu_id, start, end in session.execute(
            select(Allocation.gpu_id, Allocation.start, Allocation.end).where(
                Allocation.start < from_epoch(last), (Allocation.end.is_(None)) | (Allocation.end > from_epoch(first))
            )
        ):
            cuts[gpu_id].add(to_epoch(start))
            if end is not None:
                cuts[gpu_id].add(to_epoch(end))
        by_uuid = {uuid: gpu_id for uuid, (gpu_id, _) in gpus.items()}
        rows = []
        for hour in sorted(set(hours)):
            hi = min(hour + HOUR, until)
            segments: dict[tuple[int, int], list[str]] = defaultdict(list)
            for uuid, (gpu_id, entered) in sorted(gpus.items()):
                if entered >= hi:
                    continue
                bounds = sorted({hour, hi, *(t for t in (entered, *cuts[gpu_id]) if hour < t < hi)})
                for a, b in pairwise(bounds):
                    segments[a, b].append(uuid)
            session.execute(
                delete(TsdbGpuMetering).where(
                    TsdbGpuMetering.start >= from_epoch(hour), TsdbGpuMetering.start < from_epoch(hour + HOUR)
                )
            )
            terms = [_Term(hour, hi)] if (hour, hi) in segments else []
            terms += [
                _Term(a, b, tuple(group))
                for (a, b), uuids in sorted(segments.items())
                if (a, b) != (hour, hi)
                for group in uuid_groups(uuids)
            ]
            found = self._meter(terms, by_uuid)
            for (a, b), uuids in sorted(segments.items()):
                for uuid in uuids:
                    metered = found.get((a, b), {}).get(by_uuid[uuid])
                    if metered is not None and metered.seen:
                        rows.append(
                            {
                                "gpu_id": by_uuid[uuid],
                                "start": from_epoch(a),
                                "stop": from_epoch(b),
                                "samples": metered.samples,
                                "utilization_sum": metered.utilization_sum,
                                "energy_joules": metered.energy_joules,
                                "memory_max_bytes": metered.memory_max_bytes,
                            }
                        )
        if rows:
            session.execute(insert(TsdbGpuMetering), rows)
        return len(rows)

    def _meter(self, terms: Sequence[_Term], by_uuid: dict[str, int]) -> dict[tuple[int, int], dict[int, _Segment]]:
        """The metering of each of ``terms``' segments per known GPU that has a series in it."""
        found: dict[tuple[int, int], dict[int, _Segment]] = defaultdict(lambda: defaultdict(_Segment))
        utilization_field = self.options.utilization_fields[0]
        scale = UTILIZATION_FIELDS[utilization_field].scale
        for (a, b), count in self._ask(terms, utilization_field, _over_time("count"), by_uuid).items():
            for gpu_id, value in count.items():
                found[a, b][gpu_id].samples = round(value)
                found[a, b][gpu_id].seen = True
        for (a, b), total in self._ask(terms, utilization_field, _over_time("sum"), by_uuid).items():
            for gpu_id, value in total.items():
                found[a, b][gpu_id].utilization_sum = value * scale
        for (a, b), most in self._ask(terms, MEMORY_FIELD, _over_time("max"), by_uuid).items():
            for gpu_id, value in most.items():
                found[a, b][gpu_id].memory_max_bytes = round(value * FIELDS[MEMORY_FIELD].scale)
                found[a, b][gpu_id].seen = True
        lasts = self._ask(terms, ENERGY_FIELD, _over_time("max"), by_uuid)
        energy_terms = [term for term in terms if lasts.get((term.a, term.b))]
        if not energy_terms:
            return found
        firsts = self._ask(energy_terms, ENERGY_FIELD, _over_time("min"), by_uuid)
        before = self._ask(energy_terms, ENERGY_FIELD, _last_before, by_uuid)
        resets = self._ask(energy_terms, ENERGY_FIELD, _resets, by_uuid)
        uuids = {gpu_id: uuid for uuid, gpu_id in by_uuid.items()}
        for (a, b), per_gpu in lasts.items():
            reset = {gpu_id for gpu_id, count in resets.get((a, b), {}).items() if count > 0}
            raw = self._counter_points(sorted(uuids[g] for g in reset), a - ENERGY_GAP_SECONDS, b, by_uuid)
            for gpu_id, last in per_gpu.items():
                if gpu_id in reset:
                    increase = counter_increase(raw.get(gpu_id, []), a)
                else:
                    increase = last - before.get((a, b), {}).get(gpu_id, firsts[a, b][gpu_id])
                found[a, b][gpu_id].energy_joules = increase * FIELDS[ENERGY_FIELD].scale
                found[a, b][gpu_id].seen = True
        return found

    def _ask(
        self, terms: Sequence[_Term], dcgm_field: str, expression: Expression, by_uuid: dict[str, int]
    ) -> dict[tuple[int, int], dict[int, float]]:
        """``expression`` of ``dcgm_field``'s series over each of ``terms``: per segment (a, b), its value per known
        GPU (by its series' UUID label; MIG instance series left out, as the pull leaves them out). The terms are
        packed into as few instant queries as :data:`MAX_QUERY_CHARS` allows, each term tagged with its index in
        :data:`SEGMENT_LABEL` (``label_replace``) and the tagged terms joined by ``or``."""
        parts = [
            f'label_replace({expression(self._selector(dcgm_field, term), term.a, term.b)}, "{SEGMENT_LABEL}", '
            f'"{index}", "", "")'
            for index, term in enumerate(terms)
        ]
        values: dict[tuple[int, int], dict[int, float]] = defaultdict(dict)
        joint = " or "
        for group in packed([len(part) + len(joint) for part in parts], MAX_QUERY_CHARS + len(joint)):
            at = max(terms[index].b for index in group)
            for sample in self.client.query(joint.join(parts[index] for index in group), from_epoch(at)):
                labels = self.options.labels.dcgm_exporter(sample.labels)
                uuid = labels.get("UUID")
                if uuid in by_uuid and "GPU_I_PROFILE" not in labels:
                    term = terms[int(sample.labels[SEGMENT_LABEL])]
                    values[term.a, term.b][by_uuid[uuid]] = sample.value
        return values

    def _selector(self, dcgm_field: str, term: _Term) -> str:
        """``dcgm_field``'s series of ``term``'s GPUs (of every GPU when it names none)."""
        return gpu_selector(self.options, dcgm_field, term.uuids) if term.uuids else self.options.query(dcgm_field)

    def _counter_points(
        self, uuids: Sequence[str], a: int, b: int, by_uuid: dict[str, int]
    ) -> dict[int, list[tuple[float, float]]]:
        """Per GPU of ``uuids``, its energy counter readings of [a, b) at their own times (whole seconds, fraction
        dropped), in time order: the raw samples of a range selector (:func:`raw_readings`, some GPUs a query), so
        that a gap between two readings is the readings' own, not shortened by the server's lookback as values at
        query steps would be. MIG instance series are left out."""
        points: dict[int, list[tuple[float, float]]] = defaultdict(list)
        for group in uuid_groups(uuids):
            for series in raw_readings(self.client, gpu_selector(self.options, ENERGY_FIELD, group), a, b):
                labels = self.options.labels.dcgm_exporter(series.labels)
                if labels.get("UUID") in by_uuid and "GPU_I_PROFILE" not in labels:
                    points[by_uuid[labels["UUID"]]] += [(int(ts), value) for ts, value in series.points]
        return {gpu_id: sorted(found) for gpu_id, found in points.items()}


def _over_time(aggregation: str) -> Expression:
    """``<aggregation>_over_time`` of the segment's readings (:func:`window`)."""
    return lambda selector, a, b: f"{aggregation}_over_time({selector}{window(a, b)})"


def _last_before(selector: str, a: int, _: int) -> str:
    """The last reading within :data:`ENERGY_GAP_SECONDS` before the segment."""
    return f"last_over_time({selector}{window(a - ENERGY_GAP_SECONDS, a)})"


def _resets(selector: str, a: int, b: int) -> str:
    """The counter's resets from :data:`ENERGY_GAP_SECONDS` before the segment to its end."""
    return f"resets({selector}{window(a - ENERGY_GAP_SECONDS, b)})"
