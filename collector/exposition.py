"""``/metrics`` for the collector: the latest reading of every source, plus each source's health.

A custom prometheus-client collector renders the last cycle's samples at scrape time; scrapes never
touch a device. Clocks-event bitmasks are also exposed decoded, one 0/1 series per named reason.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from collector.contract import metric_names as m
from collector.contract.clocks_events import CLOCKS_EVENT_REASONS
from collector.contract.sample import Sample
from collector.delivery import Delivery

log = logging.getLogger(__name__)

CLOCKS_EVENT_ACTIVE = "gpufinops_gpu_clocks_event_reason_active"
CLOCKS_EVENT_HELP = "1 if the named clocks-event (throttle) reason is active (decoded NVML clocks_event_reasons)."
GPU_JOB_INFO = "gpufinops_gpu_job_info"
GPU_JOB_HELP = "1 for the job currently holding the GPU (Slurm job id, or namespace/pod), from the job map."


class LatestSamples(Collector):
    """Holds the newest cycle's samples and source health; thread-safe; registered in a CollectorRegistry."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._samples: dict[str, list[Sample]] = {}
        self._health: dict[str, tuple[bool, float]] = {}

    def update(self, source: str, samples: Sequence[Sample], success: bool, duration_seconds: float) -> None:
        """Replace ``source``'s samples (kept as they were if the cycle failed) and record its health."""
        with self._lock:
            if success:
                self._samples[source] = list(samples)
            self._health[source] = (success, duration_seconds)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            samples = [s for batch in self._samples.values() for s in batch]
            health = dict(self._health)
        families = _Families()
        for sample in samples:
            names = sorted(sample.labels)
            values = [sample.labels[n] for n in names]
            for metric, value in sample.values.items():
                spec = m.SPECS[metric]
                families.add(metric, spec.kind, spec.help, names, values, value)
            bitmask = sample.values.get(m.GPU_CLOCKS_EVENT_REASONS)
            if bitmask is not None:
                for reason, bit in CLOCKS_EVENT_REASONS.items():
                    active = 1.0 if int(bitmask) & bit else 0.0
                    families.add(CLOCKS_EVENT_ACTIVE, "gauge", CLOCKS_EVENT_HELP, [*names, "reason"], [*values, reason],
                                 active)  # fmt: skip
            if sample.entity == "gpu" and sample.job_id is not None:
                families.add(GPU_JOB_INFO, "gauge", GPU_JOB_HELP, [*names, "job_id"], [*values, sample.job_id], 1.0)
        yield from families.values()
        success = GaugeMetricFamily(
            "gpufinops_collector_source_success", "1 if the source's last collection succeeded.", labels=["source"]
        )
        duration = GaugeMetricFamily(
            "gpufinops_collector_source_duration_seconds",
            "Duration of the source's last collection.",
            labels=["source"],
        )
        for source, (ok, seconds) in sorted(health.items()):
            success.add_metric([source], 1.0 if ok else 0.0)
            duration.add_metric([source], seconds)
        yield success
        yield duration


class _Families:
    """Metric families under construction; a sample whose label names differ from its family's is dropped."""

    def __init__(self) -> None:
        self._families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {}
        self._labels: dict[str, list[str]] = {}
        self._warned: set[str] = set()

    def add(self, metric: str, kind: str, help_text: str, names: list[str], values: list[str], value: float) -> None:
        family = self._families.get(metric)
        if family is None:
            family_type = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
            family = family_type(metric.removesuffix("_total"), help_text, labels=names)
            self._families[metric] = family
            self._labels[metric] = names
        elif self._labels[metric] != names:
            if metric not in self._warned:
                log.error("%s: labels %s differ from %s; sample not exposed", metric, names, self._labels[metric])
                self._warned.add(metric)
            return
        family.add_metric(values, value)

    def values(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        return iter(self._families.values())


class DeliveryStats(Collector):
    """The spool and the sender's counters, read at scrape time from a :class:`~collector.delivery.Delivery`."""

    def __init__(self, delivery: Delivery) -> None:
        self._delivery = delivery

    def collect(self) -> Iterator[Metric]:
        delivery, spool = self._delivery, self._delivery.spool
        yield GaugeMetricFamily(
            "gpufinops_collector_spool_pending_samples",
            "GPU readings in the spool, not yet acknowledged by the service.",
            value=spool.pending_samples,
        )
        yield GaugeMetricFamily(
            "gpufinops_collector_spool_size_bytes", "Size of the spool's segment files, bytes.", value=spool.size_bytes
        )
        yield CounterMetricFamily(
            "gpufinops_collector_spool_dropped_samples",
            "GPU readings dropped unsent because the spool reached its size bound (oldest first).",
            value=spool.dropped_samples,
        )
        yield _by_reason(
            "gpufinops_collector_unspooled_samples",
            "GPU readings dropped, newest first, because the spool could not take their cycle "
            "(disk_full: ENOSPC or EDQUOT; write_error: another write error).",
            delivery.unspooled_samples,
        )
        yield CounterMetricFamily(
            "gpufinops_collector_spool_corrupt_records",
            "Spool records found torn or corrupt (CRC) and skipped.",
            value=spool.corrupt_records,
        )
        yield CounterMetricFamily(
            "gpufinops_collector_shipped_samples",
            "GPU readings the service acknowledged as stored.",
            value=delivery.shipped_samples,
        )
        yield CounterMetricFamily(
            "gpufinops_collector_rejected_samples",
            "GPU readings the service refused (4xx other than 401, 403, 408 and 429) or rejected as malformed (422); "
            "not retried.",
            value=delivery.rejected_samples,
        )
        yield _by_reason(
            "gpufinops_collector_untimely_samples",
            "Of the rejected readings, those the service refused for their time: future (stamped ahead of the "
            "service's clock beyond its grace: this node's clock is fast) or too_old (older than its retention).",
            delivery.untimely_samples,
        )
        yield CounterMetricFamily(
            "gpufinops_collector_failed_sends",
            "Ingest POSTs that failed with a network error, 5xx, 401, 403, 408 or 429 and will be retried.",
            value=delivery.failed_sends,
        )
        yield GaugeMetricFamily(
            "gpufinops_collector_credentials_rejected",
            "1 while the service refuses this node's ingest token (its last answer was 401 or 403; the readings "
            "stay spooled), else 0.",
            value=1.0 if delivery.credentials_rejected else 0.0,
        )
        yield GaugeMetricFamily(
            "gpufinops_collector_delivery_pace_seconds",
            "Seconds the sender leaves between two ingest POSTs because the service asked it to slow down "
            "(Retry-After), decaying; the cycles of that time go in one POST. 0 when not asked.",
            value=delivery.pace_seconds,
        )


def _by_reason(name: str, documentation: str, counts: Mapping[str, int]) -> CounterMetricFamily:
    """A counter family ``name`` with one sample per ``reason`` label value of ``counts`` (reason → count)."""
    family = CounterMetricFamily(name, documentation, labels=["reason"])
    for reason, count in counts.items():
        family.add_metric([reason], count)
    return family
