"""Every metric the collector exposes: name, Prometheus type, help text.

Names follow the Prometheus naming rules: ``gpufinops_`` prefix, base units as suffix, ``_total`` on
counters. Sources put these names as keys of :attr:`collector.sample.Sample.values`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """How one metric is exposed. ``kind`` is the Prometheus type; ``help`` names unit and origin."""

    name: str
    kind: Literal["gauge", "counter"]
    help: str


GPU_UTILIZATION = "gpufinops_gpu_utilization_ratio"
GPU_MEMORY_UTILIZATION = "gpufinops_gpu_memory_utilization_ratio"
GPU_MEMORY_USED = "gpufinops_gpu_memory_used_bytes"
GPU_MEMORY_TOTAL = "gpufinops_gpu_memory_total_bytes"
GPU_POWER = "gpufinops_gpu_power_watts"
GPU_ENERGY = "gpufinops_gpu_energy_joules_total"
GPU_TEMPERATURE = "gpufinops_gpu_temperature_celsius"
GPU_SM_CLOCK = "gpufinops_gpu_sm_clock_hertz"
GPU_CLOCKS_EVENT_REASONS = "gpufinops_gpu_clocks_event_reasons"
DISK_READ_BYTES = "gpufinops_disk_read_bytes_total"
DISK_WRITTEN_BYTES = "gpufinops_disk_written_bytes_total"

SPECS: dict[str, MetricSpec] = {
    spec.name: spec
    for spec in (
        MetricSpec(GPU_UTILIZATION, "gauge", "Fraction of time a kernel ran on the GPU (NVML utilization.gpu / 100)."),
        MetricSpec(
            GPU_MEMORY_UTILIZATION,
            "gauge",
            "Fraction of time device memory was read or written (NVML utilization.memory / 100).",
        ),
        MetricSpec(GPU_MEMORY_USED, "gauge", "Device memory in use, bytes (NVML memory.used, MiB x 2^20)."),
        MetricSpec(GPU_MEMORY_TOTAL, "gauge", "Device memory installed, bytes (NVML memory.total, MiB x 2^20)."),
        MetricSpec(GPU_POWER, "gauge", "Board power draw, watts (NVML power usage, mW / 1000)."),
        MetricSpec(
            GPU_ENERGY,
            "counter",
            "Energy used since the driver was loaded, joules (NVML total energy consumption, mJ / 1000).",
        ),
        MetricSpec(GPU_TEMPERATURE, "gauge", "GPU core temperature, degrees Celsius (NVML temperature.gpu)."),
        MetricSpec(GPU_SM_CLOCK, "gauge", "Streaming multiprocessor clock, hertz (NVML SM clock, MHz x 10^6)."),
        MetricSpec(
            GPU_CLOCKS_EVENT_REASONS,
            "gauge",
            "Bitmask of active clocks-event (throttle) reasons (NVML clocks_event_reasons.active; "
            "same bits as DCGM_FI_DEV_CLOCKS_EVENT_REASONS).",
        ),
        MetricSpec(DISK_READ_BYTES, "counter", "Bytes read from the block device (/proc/diskstats sectors x 512)."),
        MetricSpec(DISK_WRITTEN_BYTES, "counter", "Bytes written to the block device (/proc/diskstats sectors x 512)."),
    )
}
