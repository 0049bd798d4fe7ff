"""The ledger's metering read from a Prometheus-compatible TSDB by PromQL.

For fleets whose raw readings stay in VictoriaMetrics, Prometheus, Mimir or Thanos (dcgm-exporter or the collector
scraped by it, or remote-writing to it), the service stores no raw rows: before a rollup rebuilds some hours,
:class:`TsdbMeter` asks the TSDB, per GPU and segment of each hour, what the direct path sums from ``gpu_samples``
(:func:`finops.ledger.metering.meter`), and writes it to ``tsdb_gpu_metering``
(:class:`finops.db.ledger_tables.TsdbGpuMetering`), which the rollup then meters from.

Segments. A GPU-hour [h, h + 1 h) (clipped at the rollup's ``until``) is cut at the GPU's entry into service and at
every start and end of an allocation of the GPU, so that each holding of the hour is a union of whole segments.

Terms. An hour is asked as terms, one per segment: the whole hour (clipped), for every GPU at once (no UUID matcher:
most GPU-hours are not cut), and each segment cut inside the hour for the GPUs cut there only (a matcher on their
UUID label, :func:`~finops.ingest.promql_select.uuid_matcher`, in groups of at most half a query:
:func:`~finops.ingest.promql_select.uuid_groups`). Each value below of each
term is an ask; an hour's asks are packed into as few instant queries of at most
:data:`~finops.ingest.promql_select.MAX_QUERY_CHARS` characters as they fit in
(:func:`~finops.ingest.promql_select.ask_packed`: tagged with their index by ``label_replace``, joined by ``or``;
values of different fields share a query), each evaluated at its latest segment end, every ask at its own ``@``
instant, in two rounds: first what needs nothing else, then what depends on it (the energy counter's further
values for the terms where it has readings; each activity field's values for the GPUs that have it in the hour). So
the series the TSDB reads and answers grow with the GPUs and their segments, and the queries with the text that
names them, not with GPUs × bounds.

Queries (PromQL, Prometheus documentation "Query functions"; MetricsQL answers them the same), for a segment
[a, b) evaluated with the ``@`` modifier at ``b − 1 ms`` over a range of ``b − a``: a window that holds the
readings of [a, b) to the millisecond (the TSDBs' resolution) where ranges are open on the left (Prometheus 3,
VictoriaMetrics), and also a reading stamped at ``a − 1 ms`` exactly where they are closed (Prometheus 2). A reading
thus counts in the second its time falls in, fraction dropped, as the database stores it:

- utilisation: ``count_over_time`` and ``sum_over_time`` of the utilisation field (× its scale to a ratio);
- memory: ``max_over_time`` of ``DCGM_FI_DEV_FB_USED`` (MiB → bytes);
- hardware activity, per activity field (:data:`ACTIVITY_FIELDS`: DCGM_FI_PROF_SM_ACTIVE, SM_OCCUPANCY,
  PIPE_TENSOR_ACTIVE, DRAM_ACTIVE, PIPE_FP64/FP32/FP16_ACTIVE, GR_ENGINE_ACTIVE, ratios): first its
  ``count_over_time`` over the whole hour for every GPU, which finds the GPUs that have it (a field no GPU exports
  costs that one ask an hour); then, for those GPUs only, its ``count_over_time`` and ``sum_over_time`` per segment,
  the readings sampled as the utilisation's are. Of an activity with several fields, the first with readings in the
  segment counts. ``profiled`` (readings with a profiling field) is the most readings of one activity and
  ``readings`` the larger of that and the utilisation's: exact where the fields are read together, as one
  dcgm-exporter scrape stamps them all; a GPU exporting every field has ``readings`` = ``samples``;
- hardware activity from DCGM 4.6's cycle counters (:data:`CYCLE_ACTIVITIES`; SM, any tensor pipe, FP64/FP32/FP16),
  in place of the activity fields where they give a value: per segment, Σ Δ active / Σ Δ elapsed SM cycles over the
  intervals between consecutive readings ending in it, from the counters' ``max_over_time`` less their
  ``last_over_time`` in the hour before, or, after a reset or at a GPU's first readings, from their raw readings
  (:meth:`TsdbMeter._cycle_activity`);
- energy (``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``, a counter in mJ → J): the ledger's rule sums the increments
  between consecutive readings that end in [a, b). For a counter without a reset that is the last value in
  [a, b) (``max_over_time``) less the last one before a within an hour (``last_over_time`` over [a − 1 h, a)), or,
  without one, less the first in [a, b) (``min_over_time``). PromQL's ``increase`` is not used: it extrapolates
  to the window's edges. Where ``resets`` over [a − 1 h, b) is not 0, the counter's raw readings of that span are
  read (an instant query of a range selector naming the GPUs affected, per segment) and the increments summed here
  as the direct path sums them, a reset counting the value after it.

AMD Device Metrics Exporter's series (:mod:`finops.ingest.amd_exporter`) are metered by the same queries, each scaled
by its own unit: ``gpu_gfx_activity`` (%) as the utilisation, ``gpu_used_vram`` (MiB) as the memory,
``gpu_energy_consumed`` (µJ) as the energy counter, and its profiler fields among the activity fields. Like the
activity fields, they are first asked for the whole hour for every GPU (:data:`AMD_METERED`), then per segment for the
GPUs that have them only, and the energy counter's further values in a third round; a fleet without AMD GPUs pays
the first ask of each. GPUs are matched by ``gpu_uuid``. A package's energy counter is read on the device that
reports it (:func:`finops.ingest.amd_exporter.reports_package`) over every segment of each of its devices, and each
device gets ``1 / n`` of the increase over its own segments; so is the utilisation of a partitioned GPU whose
partition 0 alone has it in the hour, each partition getting partition 0's readings over its own segments
(:mod:`finops.ingest.tsdb_packages`). Terms, asks and their expressions: :mod:`finops.ingest.tsdb_terms`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session

from collector.contract.dcgm_fields import CYCLE_COUNTERS, FIELDS, SM_CYCLES_ELAPSED
from finops.db.ledger_tables import TsdbGpuMetering
from finops.db.models import Allocation, Gpu
from finops.ingest.amd_exporter import (
    AMD_ENERGY,
    AMD_FIELDS,
    AMD_MEMORY_USED,
    AMD_UTILIZATION,
    PACKAGE_WIDE,
    reports_package,
)
from finops.ingest.prometheus import PrometheusClient
from finops.ingest.prometheus_pull import ACTIVITY_METRICS, CYCLE_FIELDS, PullOptions, field_scale
from finops.ingest.promql_select import ask_packed, gpu_selector, raw_readings, uuid_groups
from finops.ingest.tsdb_packages import package_activity, package_energy, read_on_reporters
from finops.ingest.tsdb_terms import (
    COUNT,
    ENERGY_GAP_SECONDS,
    MAX,
    MIN,
    SUM,
    Answers,
    Ask,
    Expression,
    Term,
    last_before,
    narrowed,
    resets,
)
from finops.ledger.sql import ACTIVITIES
from finops.timeutil import HOUR, from_epoch, to_epoch

ENERGY_FIELD = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
MEMORY_FIELD = "DCGM_FI_DEV_FB_USED"
MEMORY_FIELDS = (MEMORY_FIELD, AMD_MEMORY_USED)
"""The memory-used series metered: dcgm-exporter's, AMD's exporter's (a GPU has one of them)."""
AMD_METERED = (AMD_UTILIZATION, AMD_MEMORY_USED, AMD_ENERGY)
"""AMD's exporter's series metered beside the DCGM fields (utilisation %, memory used MiB, the µJ energy counter)."""
ACTIVITY_FIELDS: dict[str, tuple[str, ...]] = {
    activity: tuple(
        name for name, spec in (*FIELDS.items(), *AMD_FIELDS.items()) if ACTIVITY_METRICS.get(spec.metric) == activity
    )
    for activity in ACTIVITIES
}
"""Per hardware activity (:data:`finops.ledger.sql.ACTIVITIES`), the DCGM fields that give it
(:data:`collector.contract.dcgm_fields.FIELDS`; several where a field has another name), then AMD's exporter's
(:data:`finops.ingest.amd_exporter.AMD_FIELDS`), in order of preference."""
CYCLE_ACTIVITIES: dict[str, str] = {
    name: ACTIVITY_METRICS[CYCLE_COUNTERS[name]] for name in CYCLE_FIELDS if name != SM_CYCLES_ELAPSED
}
"""DCGM 4.6's active-cycles counters metered -> the activity each gives as Δ counter / Δ elapsed SM cycles
(:data:`collector.contract.dcgm_fields.CYCLE_COUNTERS`), in place of the activity's ratio fields."""


def cycle_sums(
    elapsed: Iterable[tuple[float, float]], active: Iterable[tuple[float, float]], a: int
) -> tuple[float, float, int]:
    """(Σ Δ active, Σ Δ elapsed, intervals) of a GPU's cycle counters over the intervals between consecutive
    ``elapsed`` readings (epoch seconds, value; in time order) that end at or after ``a`` (epoch seconds), are at
    most :data:`ENERGY_GAP_SECONDS` long, and have an ``active`` reading at both ends (the same instants: one
    scrape stamps both). An interval counts where both counters grew or held (Δ elapsed > 0, 0 <= Δ active <=
    Δ elapsed); one across a reset (a counter went down) or without growth does not: no value, never 0."""
    at = dict(active)
    sums = (0.0, 0.0, 0)
    previous: tuple[float, float] | None = None
    for ts, value in elapsed:
        if previous is not None and ts >= a and ts - previous[0] <= ENERGY_GAP_SECONDS:
            d_elapsed = value - previous[1]
            if previous[0] in at and ts in at and d_elapsed > 0 and 0 <= at[ts] - at[previous[0]] <= d_elapsed:
                sums = (sums[0] + at[ts] - at[previous[0]], sums[1] + d_elapsed, sums[2] + 1)
        previous = (ts, value)
    return sums


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
    activity: dict[str, tuple[float, int]] = field(default_factory=dict)  # activity → (Σ ratio, readings)

    @property
    def profiled(self) -> int:
        """Readings with a profiling field: the most readings of one activity (they are read together)."""
        return max((n for _, n in self.activity.values()), default=0)

    @property
    def readings(self) -> int:
        """Readings with a utilisation or a profiling field."""
        return max(self.samples, self.profiled)


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
            terms = [Term(hour, hi)] if (hour, hi) in segments else []
            terms += [
                Term(a, b, tuple(group))
                for (a, b), uuids in sorted(segments.items())
                if (a, b) != (hour, hi)
                for group in uuid_groups(uuids)
            ]
            found = self._meter(terms, Term(hour, hi), by_uuid)
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
                                "readings": metered.readings,
                                "profiled": metered.profiled,
                                **{
                                    f"{activity}_{part}": value
                                    for activity in ACTIVITIES
                                    for part, value in zip(
                                        ("sum", "n"), metered.activity.get(activity, (0.0, 0)), strict=True
                                    )
                                },
                            }
                        )
        if rows:
            session.execute(insert(TsdbGpuMetering), rows)
        return len(rows)

    def _meter(
        self, terms: Sequence[Term], whole: Term, by_uuid: dict[str, int]
    ) -> dict[tuple[int, int], dict[int, _Segment]]:
        """The metering of each of ``terms``' segments per known GPU that has a series in it; ``whole``: the
        (clipped) hour the terms lie in, for every GPU.

        Two rounds of queries. First, per term, the utilisation's count and sum, the memory's and the energy
        counter's most; and per activity field and cycle counter the count over ``whole`` for every GPU, which
        tells the GPUs that have it in the hour. Then, for the terms with an energy counter, its least, last before
        and resets; per activity field the GPUs that have it: its count and sum over each term, naming only those
        GPUs (a field no GPU exports costs no second-round query); per cycle counter the GPUs that have it and the
        elapsed counter: its most and last before over each term, and the elapsed counter's count and resets
        (:meth:`_cycle_activity`)."""
        if not terms:
            return {}
        utilization_field = self.options.utilization_fields[0]
        fields = [name for names in ACTIVITY_FIELDS.values() for name in names]
        kinds = ((utilization_field, COUNT), (utilization_field, SUM), (MEMORY_FIELD, MAX), (ENERGY_FIELD, MAX))
        first = [Ask(dcgm_field, expression, term) for term in terms for dcgm_field, expression in kinds]
        presence = (*fields, *CYCLE_FIELDS, *AMD_METERED)
        labels: dict[int, dict[str, str]] = {}
        whole_asks = [*(Ask(name, COUNT, whole) for name in presence), Ask(AMD_ENERGY, MAX, whole)]
        got = self._answers([*first, *whole_asks], by_uuid, labels)
        present = {name: set(got[Ask(name, COUNT, whole)]) for name in presence}
        uuids = {gpu_id: uuid for uuid, gpu_id in by_uuid.items()}

        def for_gpus(gpu_ids: set[int]) -> list[Term]:
            return narrowed(terms, {uuids[gpu_id] for gpu_id in gpu_ids})

        # AMD's exporter's series are asked per segment only for the GPUs that have them in the hour, as the
        # activity fields are (a fleet without AMD GPUs pays one ask of each for the whole hour); what a package
        # reports once, on its reporter over each of its devices' segments (finops.ingest.tsdb_packages).
        shared = {
            AMD_ENERGY: package_energy(labels, got[Ask(AMD_ENERGY, MAX, whole)]),
            AMD_UTILIZATION: package_activity(labels, present[AMD_UTILIZATION]),
        }
        metered_terms = {utilization_field: list(terms), MEMORY_FIELD: list(terms), ENERGY_FIELD: list(terms)}
        metered_terms |= {
            name: read_on_reporters(terms, shared.get(name, {}), present[name], uuids) for name in AMD_METERED
        }
        energy_terms = [(ENERGY_FIELD, term) for term in terms if got[Ask(ENERGY_FIELD, MAX, term)]]
        activity_terms = {name: for_gpus(present[name]) for name in fields}
        counted = present[SM_CYCLES_ELAPSED] & set().union(*(present[name] for name in CYCLE_ACTIVITIES))
        cycle_terms = {name: for_gpus(present[name] & counted) for name in CYCLE_FIELDS}
        second = [Ask(name, e, term) for name, term in energy_terms for e in (MIN, last_before, resets)]
        second += [Ask(n, e, term) for n, kept in activity_terms.items() for term in kept for e in (COUNT, SUM)]
        second += [Ask(SM_CYCLES_ELAPSED, e, term) for term in cycle_terms[SM_CYCLES_ELAPSED] for e in (COUNT, resets)]
        second += [Ask(n, e, term) for n, kept in cycle_terms.items() for term in kept for e in (MAX, last_before)]
        second += [Ask(AMD_UTILIZATION, e, term) for term in metered_terms[AMD_UTILIZATION] for e in (COUNT, SUM)]
        second += [Ask(name, MAX, term) for name in (AMD_MEMORY_USED, AMD_ENERGY) for term in metered_terms[name]]
        got.update(self._answers([ask for ask in dict.fromkeys(second) if ask not in got], by_uuid))
        amd_energy = [(AMD_ENERGY, term) for term in metered_terms[AMD_ENERGY] if got[Ask(AMD_ENERGY, MAX, term)]]
        third = [Ask(name, e, term) for name, term in amd_energy for e in (MIN, last_before, resets)]
        got.update(self._answers(third, by_uuid) if third else {})
        energy_terms += amd_energy

        found: dict[tuple[int, int], dict[int, _Segment]] = defaultdict(lambda: defaultdict(_Segment))
        for name in (utilization_field, AMD_UTILIZATION):  # a GPU has one exporter's
            for term in metered_terms[name]:
                segment = found[term.a, term.b]
                totals = got[Ask(name, SUM, term)]
                for gpu_id, value in got[Ask(name, COUNT, term)].items():
                    package = shared.get(name, {}).get(gpu_id)
                    for member in package.members if package else (gpu_id,):  # partition 0's readings, as they are
                        segment[member].samples = round(value)
                        segment[member].utilization_sum = totals.get(gpu_id, 0.0) * field_scale(name)
                        segment[member].seen = True
        for name in MEMORY_FIELDS:
            for term in metered_terms[name]:
                for gpu_id, value in got[Ask(name, MAX, term)].items():
                    found[term.a, term.b][gpu_id].memory_max_bytes = round(value * field_scale(name))
                    found[term.a, term.b][gpu_id].seen = True
        self._cycle_activity(found, cycle_terms, got, by_uuid)
        for activity, names in ACTIVITY_FIELDS.items():
            for name in names:  # the first field of the activity with readings in the segment
                for term in activity_terms[name]:
                    totals = got[Ask(name, SUM, term)]
                    for gpu_id, count in got[Ask(name, COUNT, term)].items():
                        metered = found[term.a, term.b][gpu_id]
                        if count > 0 and activity not in metered.activity:
                            metered.activity[activity] = (totals.get(gpu_id, 0.0) * field_scale(name), round(count))
                            metered.seen = True
        packages = shared[AMD_ENERGY]
        reported = {member for package in packages.values() for member in package.members}
        for name, term in energy_terms:
            a, b = term.a, term.b
            firsts, before = got[Ask(name, MIN, term)], got[Ask(name, last_before, term)]
            reset = {gpu_id for gpu_id, count in got[Ask(name, resets, term)].items() if count > 0}
            raw = self._counter_points(name, sorted(uuids[g] for g in reset), a - ENERGY_GAP_SECONDS, b, by_uuid)
            for gpu_id, last in got[Ask(name, MAX, term)].items():
                if gpu_id in reported and gpu_id not in packages:
                    continue  # a device whose package's counter another device reports
                if gpu_id in reset:
                    increase = counter_increase(raw.get(gpu_id, []), a)
                else:
                    increase = last - before.get(gpu_id, firsts[gpu_id])
                package = packages.get(gpu_id) if name == AMD_ENERGY else None
                for member in package.members if package else (gpu_id,):
                    found[a, b][member].energy_joules = (
                        increase * field_scale(name) / (package.devices if package else 1)
                    )
                    found[a, b][member].seen = True
        return found

    def _cycle_activity(
        self,
        found: dict[tuple[int, int], dict[int, _Segment]],
        cycle_terms: dict[str, list[Term]],
        got: Answers,
        by_uuid: dict[str, int],
    ) -> None:
        """Set each segment's activities that DCGM 4.6's cycle counters give (:data:`CYCLE_ACTIVITIES`) in
        ``found``, from the answers ``got`` to the asks of ``cycle_terms`` (per counter, its terms).

        Per GPU, segment [a, b) and active counter A, over the intervals between consecutive readings that end in
        [a, b) (E the elapsed counter): Σ Δ A / Σ Δ E, the readings counted as the intervals, each activity's
        ``(mean × intervals, intervals)``. Where E has a reading within the hour before a and no reset in
        [a − 1 h, b): Δ = the most in [a, b) less that last reading before (``last_over_time``), the intervals E's
        readings in [a, b). Elsewhere (a reset, or the GPU's first readings), the raw readings of E and the active
        counters over [a − 1 h, b) are read and summed by :func:`cycle_sums`. No value (never 0) where E did not
        grow, A went down or grew more than E (a reset of A alone, or counters that disagree); the activity's ratio
        fields stand there if the GPU exports them."""
        uuids = {gpu_id: uuid for uuid, gpu_id in by_uuid.items()}
        values: dict[tuple[str, Expression], dict[tuple[int, int], dict[int, float]]] = defaultdict(
            lambda: defaultdict(dict)
        )
        for name, kept in cycle_terms.items():
            for term in kept:
                for expression in (MAX, last_before, COUNT, resets):
                    values[name, expression][term.a, term.b].update(got.get(Ask(name, expression, term), {}))
        elapsed = SM_CYCLES_ELAPSED
        for a, b in {(term.a, term.b) for term in cycle_terms[elapsed]}:
            last, before = values[elapsed, MAX][a, b], values[elapsed, last_before][a, b]
            counts, reset = values[elapsed, COUNT][a, b], values[elapsed, resets][a, b]
            exact = {gpu_id for gpu_id in last if gpu_id in before and reset.get(gpu_id, 0) == 0}
            reread = sorted(uuids[gpu_id] for gpu_id in last if gpu_id not in exact)
            raw = {
                name: self._counter_points(name, reread, a - ENERGY_GAP_SECONDS, b, by_uuid) if reread else {}
                for name in CYCLE_FIELDS
            }
            for gpu_id in last:
                metered = found[a, b][gpu_id]
                for name, activity in CYCLE_ACTIVITIES.items():
                    if gpu_id not in exact:
                        d_active, d_elapsed, n = cycle_sums(raw[elapsed].get(gpu_id, []), raw[name].get(gpu_id, []), a)
                    else:
                        active_last, active_before = values[name, MAX][a, b], values[name, last_before][a, b]
                        if gpu_id not in active_last or gpu_id not in active_before:
                            continue
                        d_active = active_last[gpu_id] - active_before[gpu_id]
                        d_elapsed, n = last[gpu_id] - before[gpu_id], round(counts.get(gpu_id, 0))
                    if n > 0 and d_elapsed > 0 and 0 <= d_active <= d_elapsed:
                        metered.activity[activity] = (d_active / d_elapsed * n, n)
                        metered.seen = True

    def _answers(
        self, asks: Sequence[Ask], by_uuid: dict[str, int], labels: dict[int, dict[str, str]] | None = None
    ) -> Answers:
        """Each of ``asks``: its value per known GPU (by its series' UUID label; MIG instance series left out, as
        the pull leaves them out). The asks are packed into as few instant queries as
        :data:`~finops.ingest.promql_select.MAX_QUERY_CHARS` allows (:func:`~finops.ingest.promql_select.ask_packed`:
        a query is evaluated at the latest segment end of its asks). ``labels``, if given, gets the canonical labels
        of each GPU with an answer to an ask of AMD's exporter's series (:data:`AMD_METERED`)."""
        asks = list(dict.fromkeys(asks))
        expressions = [
            (ask.expression(self._selector(ask.dcgm_field, ask.term), ask.term.a, ask.term.b), ask.term.b)
            for ask in asks
        ]
        values: Answers = {ask: {} for ask in asks}
        for ask, samples in zip(asks, ask_packed(self.client, expressions), strict=True):
            for sample in samples:
                gpu_id = self._gpu_of(sample.labels, ask.dcgm_field, by_uuid)
                if gpu_id is not None:
                    values[ask][gpu_id] = sample.value
                    if labels is not None and gpu_id not in labels and ask.dcgm_field in AMD_METERED:
                        labels[gpu_id] = self.options.labels.canonical(sample.labels)
        return values

    def _gpu_of(self, labels: dict[str, str], dcgm_field: str, by_uuid: dict[str, int]) -> int | None:
        """The known GPU (``gpus.id``) a series of ``dcgm_field`` is of, by its UUID label; None for an unknown GPU,
        a MIG instance (the pull leaves them out) and, for a package-wide AMD field (power, energy), a device other
        than the one reporting its package (:func:`finops.ingest.amd_exporter.reports_package`)."""
        canonical = self.options.labels.canonical(labels)
        if "GPU_I_PROFILE" in canonical or (dcgm_field in PACKAGE_WIDE and not reports_package(canonical)):
            return None
        return by_uuid.get(canonical.get("UUID", ""))

    def _selector(self, dcgm_field: str, term: Term) -> str:
        """``dcgm_field``'s series of ``term``'s GPUs (of every GPU when it names none)."""
        return gpu_selector(self.options, dcgm_field, term.uuids) if term.uuids else self.options.query(dcgm_field)

    def _counter_points(
        self, dcgm_field: str, uuids: Sequence[str], a: int, b: int, by_uuid: dict[str, int]
    ) -> dict[int, list[tuple[float, float]]]:
        """Per GPU of ``uuids``, its counter ``dcgm_field``'s readings of [a, b) at their own times (whole seconds,
        fraction dropped), in time order: the raw samples of a range selector (:func:`raw_readings`, some GPUs a
        query), so that a gap between two readings is the readings' own, not shortened by the server's lookback as
        values at query steps would be. MIG instance series are left out."""
        points: dict[int, list[tuple[float, float]]] = defaultdict(list)
        for group in uuid_groups(uuids):
            for series in raw_readings(self.client, gpu_selector(self.options, dcgm_field, group), a, b):
                gpu_id = self._gpu_of(series.labels, dcgm_field, by_uuid)
                if gpu_id is not None:
                    points[gpu_id] += [(int(ts), value) for ts, value in series.points]
        return {gpu_id: sorted(found) for gpu_id, found in points.items()}
