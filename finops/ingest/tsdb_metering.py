"""The ledger's metering read from a Prometheus-compatible TSDB by PromQL.

For fleets whose raw readings stay in VictoriaMetrics, Prometheus, Mimir or Thanos (dcgm-exporter or the collector
scraped by it, or remote-writing to it), the service stores no raw rows: before a rollup rebuilds some hours,
:class:`TsdbMeter` asks the TSDB, per GPU and segment of each hour, what the direct path sums from ``gpu_samples``
(:func:`finops.ledger.sql.meter`), and writes it to ``tsdb_gpu_metering`` (:class:`finops.db.models.TsdbGpuMetering`),
which the rollup then meters from.

Segments. A GPU-hour [h, h + 1 h) (clipped at the rollup's ``until``) is cut at the GPU's entry into service and at
every start and end of an allocation of the GPU, so that each holding of the hour is a union of whole segments.
Segments with the same bounds are asked for all GPUs at once (whole hours: one set of queries per hour).

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
  read (an instant query of a range selector, one per GPU affected) and the increments summed here as the direct
  path sums them, a reset counting the value after it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
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


def gpu_selector(options: PullOptions, dcgm_field: str, uuid: str) -> str:
    """``dcgm_field``'s series of one GPU: ``options``' selector and ``<UUID label>="<uuid>"``."""
    matcher = f"{options.labels.uuid}={promql_string(uuid)}"
    return f"{dcgm_field}{{{', '.join(filter(None, (selector_matchers(options.selector), matcher)))}}}"


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
        segments: dict[tuple[int, int], set[int]] = defaultdict(set)
        for hour in sorted(set(hours)):
            hi = min(hour + HOUR, until)
            for gpu_id, entered in gpus.values():
                if entered >= hi:
                    continue
                bounds = sorted({hour, hi, *(t for t in (entered, *cuts[gpu_id]) if hour < t < hi)})
                for a, b in pairwise(bounds):
                    segments[a, b].add(gpu_id)
            session.execute(
                delete(TsdbGpuMetering).where(
                    TsdbGpuMetering.start >= from_epoch(hour), TsdbGpuMetering.start < from_epoch(hour + HOUR)
                )
            )
        by_uuid = {uuid: gpu_id for uuid, (gpu_id, _) in gpus.items()}
        rows = []
        for (a, b), wanted in sorted(segments.items()):
            for gpu_id, found in self._segment(a, b, by_uuid).items():
                if gpu_id in wanted and found.seen:
                    rows.append(
                        {
                            "gpu_id": gpu_id,
                            "start": from_epoch(a),
                            "stop": from_epoch(b),
                            "samples": found.samples,
                            "utilization_sum": found.utilization_sum,
                            "energy_joules": found.energy_joules,
                            "memory_max_bytes": found.memory_max_bytes,
                        }
                    )
        if rows:
            session.execute(insert(TsdbGpuMetering), rows)
        return len(rows)

    def _by_gpu(self, promql: str, at: int, by_uuid: dict[str, int]) -> dict[int, float]:
        """The instant query's value per known GPU (by its series' UUID label; MIG instance series left out, as
        the pull leaves them out)."""
        values = {}
        for sample in self.client.query(promql, from_epoch(at)):
            labels = self.options.labels.dcgm_exporter(sample.labels)
            uuid = labels.get("UUID")
            if uuid in by_uuid and "GPU_I_PROFILE" not in labels:
                values[by_uuid[uuid]] = sample.value
        return values

    def _segment(self, a: int, b: int, by_uuid: dict[str, int]) -> dict[int, _Segment]:
        """The metering of [a, b) per known GPU that has a series in it."""
        found: dict[int, _Segment] = defaultdict(_Segment)
        utilization_field = self.options.utilization_fields[0]
        utilization = self.options.query(utilization_field)
        energy = self.options.query(ENERGY_FIELD)
        memory = self.options.query(MEMORY_FIELD)
        w = window(a, b)
        scale = UTILIZATION_FIELDS[utilization_field].scale
        for gpu_id, count in self._by_gpu(f"count_over_time({utilization}{w})", b, by_uuid).items():
            found[gpu_id].samples = round(count)
            found[gpu_id].seen = True
        for gpu_id, total in self._by_gpu(f"sum_over_time({utilization}{w})", b, by_uuid).items():
            found[gpu_id].utilization_sum = total * scale
        for gpu_id, most in self._by_gpu(f"max_over_time({memory}{w})", b, by_uuid).items():
            found[gpu_id].memory_max_bytes = round(most * FIELDS[MEMORY_FIELD].scale)
            found[gpu_id].seen = True
        lasts = self._by_gpu(f"max_over_time({energy}{w})", b, by_uuid)
        if lasts:
            firsts = self._by_gpu(f"min_over_time({energy}{w})", b, by_uuid)
            before = self._by_gpu(f"last_over_time({energy}{window(a - ENERGY_GAP_SECONDS, a)})", a, by_uuid)
            resets = self._by_gpu(f"resets({energy}{window(a - ENERGY_GAP_SECONDS, b)})", b, by_uuid)
            uuids = {gpu_id: uuid for uuid, gpu_id in by_uuid.items()}
            for gpu_id, last in lasts.items():
                if resets.get(gpu_id, 0.0) > 0:
                    raw = self._counter_points(uuids[gpu_id], a - ENERGY_GAP_SECONDS, b)
                    increase = counter_increase(raw, a)
                else:
                    increase = last - before.get(gpu_id, firsts[gpu_id])
                found[gpu_id].energy_joules = increase * FIELDS[ENERGY_FIELD].scale
                found[gpu_id].seen = True
        return found

    def _counter_points(self, uuid: str, a: int, b: int) -> list[tuple[float, float]]:
        """One GPU's energy counter readings of [a, b) at their own times (whole seconds, fraction dropped), in time
        order: the raw samples of a range selector (:func:`raw_readings`), so that a gap between two readings is the
        readings' own, not shortened by the server's lookback as values at query steps would be."""
        series = raw_readings(self.client, gpu_selector(self.options, ENERGY_FIELD, uuid), a, b)
        return sorted((int(ts), value) for s in series for ts, value in s.points)
