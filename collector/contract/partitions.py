"""AMD Instinct packages shown as several devices, as the collector and the service both describe them.

An MI300X in DPX, QPX or CPX compute-partition mode shows as 2, 4 or 8 devices (AMD Instinct MI300X "GPU
partitioning" documentation: 8 XCDs split in equal partitions). Each is named ``<product name> (<MODE> partition
1/<n>)``, which the service prices at ``1 / n`` of the product's rate (:mod:`finops.pricing.package_share`).

What AMD reports once per package rather than per device (:data:`PARTITION_PACKAGE_FIELDS`,
:data:`DIE_PACKAGE_FIELDS`) is marked on the device that reports it (:class:`collector.contract.sample.Package`) by
the amdsmi source and by the service's Prometheus pull, and split over the package's devices at ingest
(:mod:`finops.ingest.package_split`).
"""

from __future__ import annotations

from collector.contract import metric_names as m

PARTITIONS_PER_MODE = {"dpx": 2, "qpx": 4, "cpx": 8}
"""Compute partitions of an MI300X per ``gpu_compute_partition_type`` (amd-smi's compute partition modes)."""

PARTITION_PACKAGE_FIELDS = ("utilization_ratio", "memory_utilization_ratio", "power_watts", "energy_joules")
"""What an MI300-series GPU in a partitioned mode reports on partition 0 only, for the whole GPU: activity (GFX, UMC),
socket power and the energy counter (wire field names, :data:`collector.contract.wire.PACKAGE_FIELDS`)."""
DIE_PACKAGE_FIELDS = ("power_watts", "energy_joules")
"""What a two-die package (MI250X, MI250) reports on its primary die only: socket power and energy (Linux amdgpu,
aldebaran_ppt.c: "Valid power data is available only from primary die"; the secondary die reads 0, or N/A in ROCm
6.0.2 and later)."""
PACKAGE_FIELD_METRICS = {
    "utilization_ratio": m.GPU_UTILIZATION,
    "memory_utilization_ratio": m.GPU_MEMORY_UTILIZATION,
    "power_watts": m.GPU_POWER,
    "energy_joules": m.GPU_ENERGY,
}
"""The metric (:mod:`collector.contract.metric_names`) of each wire field of :data:`PARTITION_PACKAGE_FIELDS` and
:data:`DIE_PACKAGE_FIELDS`."""


def partition_name(product: str, mode: str) -> str:
    """The GPU name of one compute partition of ``product`` in ``mode`` (``cpx`` …, any case):
    ``partition_name("AMD Instinct MI300X OAM", "cpx") == "AMD Instinct MI300X OAM (CPX partition 1/8)"``;
    ``product`` itself for a mode that is not partitioned (``spx``, ``none``, '')."""
    devices = PARTITIONS_PER_MODE.get(mode.lower())
    return f"{product} ({mode.upper()} partition 1/{devices})" if devices else product
