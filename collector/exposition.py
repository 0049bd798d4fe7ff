"""``/metrics`` for the collector: the latest reading of every source, plus each source's health.

A custom prometheus-client collector renders the last cycle's samples at scrape time; scrapes never
touch a device. Clocks-event bitmasks are also exposed decoded, one 0/1 series per named reason.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from collector import metric_names as m
from collector.sample import Sample

# NVML nvmlClocksEventReason* bits (nvml.h), the same as DCGM_CLOCKS_EVENT_REASON_*.
CLOCKS_EVENT_REASONS: dict[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal": 0x20,
    "hw_thermal": 0x40,
    "hw_power_brake": 0x80,
    "display_clock_setting": 0x100,
}
CLOCKS_EVENT_ACTIVE = "gpufinops_gpu_clocks_event_reason_active"


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
        families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {}
        reasons = GaugeMetricFamily(
            CLOCKS_EVENT_ACTIVE,
            "1 if the named clocks-event (throttle) reason is active (decoded NVML clocks_event_reasons).",
            labels=["gpu", "uuid", "model", "reason"],
        )
        for sample in samples:
            names = sorted(sample.labels)
            values = [sample.labels[n] for n in names]
            for metric, value in sample.values.items():
                spec = m.SPECS[metric]
                family = families.get(metric)
                if family is None:
                    family_type = CounterMetricFamily if spec.kind == "counter" else GaugeMetricFamily
                    family = family_type(metric.removesuffix("_total"), spec.help, labels=names)
                    families[metric] = family
                family.add_metric(values, value)
            bitmask = sample.values.get(m.GPU_CLOCKS_EVENT_REASONS)
            if bitmask is not None:
                for reason, bit in CLOCKS_EVENT_REASONS.items():
                    reasons.add_metric([*values, reason], 1.0 if int(bitmask) & bit else 0.0)
        yield from families.values()
        if reasons.samples:
            yield reasons
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
