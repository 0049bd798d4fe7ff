"""The GPU name of one compute partition of an AMD Instinct MI300X, as the collector and the service both write it.

An MI300X in DPX, QPX or CPX compute-partition mode shows as 2, 4 or 8 devices (AMD Instinct MI300X "GPU
partitioning" documentation: 8 XCDs split in equal partitions). Each is named ``<product name> (<MODE> partition
1/<n>)``, which the service prices at ``1 / n`` of the product's rate (:mod:`finops.pricing.package_share`).
"""

from __future__ import annotations

PARTITIONS_PER_MODE = {"dpx": 2, "qpx": 4, "cpx": 8}
"""Compute partitions of an MI300X per ``gpu_compute_partition_type`` (amd-smi's compute partition modes)."""


def partition_name(product: str, mode: str) -> str:
    """The GPU name of one compute partition of ``product`` in ``mode`` (``cpx`` …, any case):
    ``partition_name("AMD Instinct MI300X OAM", "cpx") == "AMD Instinct MI300X OAM (CPX partition 1/8)"``;
    ``product`` itself for a mode that is not partitioned (``spx``, ``none``, '')."""
    devices = PARTITIONS_PER_MODE.get(mode.lower())
    return f"{product} ({mode.upper()} partition 1/{devices})" if devices else product
