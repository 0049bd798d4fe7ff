"""AMD Device Metrics Exporter's series (ROCm/device-metrics-exporter) as the Prometheus pull and the TSDB metering
read them, beside dcgm-exporter's.

The exporter names each series after its field in lower case (``GPU_GFX_ACTIVITY`` → ``gpu_gfx_activity``) in the
field's own unit, as its field list documents (``docs/configuration/metricslist.md``). :data:`AMD_FIELDS` maps each
field we use to our metric and scale (:class:`collector.contract.dcgm_fields.Field`), in order of preference where
several give one metric:

- utilisation: ``gpu_gfx_activity``, graphics engine usage in % (0-100) → ratio. On a partitioned MI300X exporter
  1.3.1 (ROCm/device-metrics-exporter issue 139) reports each partition's own activity; earlier ones report it on
  partition 0 only, as the field list's current text does ("amdsmi does not return per-partition activity data"),
  and it is then the GPU's, shared over its partitions (:func:`mark_packages`);
- memory controller activity: ``gpu_umc_activity`` % → ``memory_utilization_ratio`` (what DCGM_FI_DEV_MEM_COPY_UTIL
  gives for NVIDIA);
- memory: ``gpu_used_vram`` and ``gpu_total_vram``, written "MB" by the field list; the values are amd-smi's VRAM
  figures in MiB (an MI210's 64 GiB shows as 65,520) → bytes;
- power: ``gpu_package_power`` (MI3xx, current socket power), else ``gpu_average_package_power`` (MI2xx), else
  ``gpu_power_usage``, all W;
- energy: ``gpu_energy_consumed``, "accumulated energy consumed by the GPU in Micro Jules (uJ)", a counter → J;
- temperature: ``gpu_junction_temperature`` (MI3xx hotspot), else ``gpu_edge_temperature`` (MI2xx), °C;
- hardware activity, from the opt-in profiler fields (``GPU_PROF_*``, off unless the exporter's ``ProfilerMetrics``
  enables them), % → ratio: ``gpu_prof_sm_active`` (share of GPU time the vector ALUs processed instructions) →
  ``sm_active_ratio``; ``gpu_prof_occupancy_percent`` (occupancy as a share of the maximum) →
  ``sm_occupancy_ratio``; ``gpu_prof_tensor_active_percent`` (MFMA, AMD's matrix cores) → ``tensor_active_ratio``;
  ``gpu_prof_gui_util_percent`` (share of time the graphics engine, GUI, was active) →
  ``graphics_engine_active_ratio``. AMD has no counterpart of ``dram_active_ratio`` nor of the FP64/FP32/FP16 pipe
  activities (it counts operations, ``GPU_PROF_TOTAL_64_OPS``…, not busy cycles): those stay null, never 0.

Identity (:func:`canonical_labels`): node = ``hostname``; GPU index = ``gpu_id``; UUID = ``gpu_uuid`` (exporters that
predate the label: set the UUID label to ``serial_number`` for unpartitioned GPUs); model = ``card_series`` ("AMD
Instinct MI300X", which the price catalogue's MI300X row matches), else ``card_model`` (a board part number such as
``102-D67305-00``, which prices nothing until the catalogue names it); job = ``job_id`` (the exporter's Slurm
integration), else ``<namespace>/<pod>``. An MI250X shows as two GPUs (its GCDs), an MI300-series GPU in DPX, TPX, QPX
or CPX mode as 2, 3, 4 or 8 (its compute partitions, ``gpu_partition_id`` 0… and ``gpu_compute_partition_type``): each
is a GPU of the ledger, as amd-smi and Slurm count them; a partition's model names its share of the package ("AMD
Instinct MI300X OAM (CPX partition 1/8)"), which prices it at that share of the MI300X
(:mod:`finops.pricing.package_share`); the catalogue prices the MI250X per GCD already.

Package-wide readings: AMD reports socket power and the energy counter once per package, on partition 0 of a
partitioned MI300X and on one die of an MI250X (:func:`reports_package`; a partition other than 0 keeps none of those
series). The pull marks each device's package as the amdsmi collector source does (:func:`mark_packages`), so that
ingest splits what the package reports over its devices by its one rule (:mod:`finops.ingest.package_split`): each
device's power and energy are ``1 / n`` of the package's, never counted twice and never 0 for "not reported".
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from collector.contract import metric_names as m
from collector.contract.dcgm_fields import MIB, Field
from collector.contract.partitions import (
    DIE_PACKAGE_FIELDS,
    PACKAGE_FIELD_METRICS,
    PARTITION_PACKAGE_FIELDS,
    PARTITIONED_MODES,
    package_devices,
)
from collector.contract.sample import Package, Sample
from collector.contract.wire import PACKAGE_SUMMED_FIELDS
from finops.pricing.package_share import partition_name
from finops.timeutil import floor_hour, to_epoch

AMD_UTILIZATION = "gpu_gfx_activity"
"""The exporter's utilisation field (% of time the graphics engine was busy)."""
AMD_MEMORY_USED = "gpu_used_vram"
AMD_MEMORY_TOTAL = "gpu_total_vram"
"""The exporter's VRAM size (MiB): a series every device exports, each partition of a partitioned MI300X its own
slice, in every exporter version (it is exported wherever the size is not 0), where activity, temperatures and clocks
are partition 0's only in some (``metricslist.md``, "In partitioned mode ... applicable for primary partition")."""
AMD_ENERGY = "gpu_energy_consumed"

AMD_FIELDS: dict[str, Field] = {
    AMD_UTILIZATION: Field(m.GPU_UTILIZATION, 0.01),  # %
    "gpu_umc_activity": Field(m.GPU_MEMORY_UTILIZATION, 0.01),  # %
    AMD_MEMORY_USED: Field(m.GPU_MEMORY_USED, MIB),  # MiB ("MB")
    AMD_MEMORY_TOTAL: Field(m.GPU_MEMORY_TOTAL, MIB),  # MiB ("MB")
    "gpu_package_power": Field(m.GPU_POWER, 1.0),  # W, MI3xx
    "gpu_average_package_power": Field(m.GPU_POWER, 1.0),  # W, MI2xx
    "gpu_power_usage": Field(m.GPU_POWER, 1.0),  # W
    AMD_ENERGY: Field(m.GPU_ENERGY, 1e-6),  # µJ, a counter
    "gpu_junction_temperature": Field(m.GPU_TEMPERATURE, 1.0),  # °C, MI3xx
    "gpu_edge_temperature": Field(m.GPU_TEMPERATURE, 1.0),  # °C, MI2xx
    "gpu_prof_sm_active": Field(m.GPU_SM_ACTIVE, 0.01),  # %
    "gpu_prof_occupancy_percent": Field(m.GPU_SM_OCCUPANCY, 0.01),  # %
    "gpu_prof_tensor_active_percent": Field(m.GPU_TENSOR_ACTIVE, 0.01),  # % (MFMA)
    "gpu_prof_gui_util_percent": Field(m.GPU_GRAPHICS_ENGINE_ACTIVE, 0.01),  # %
}
"""Exporter series → our metric and scale (units: the exporter's ``metricslist.md``); see the module documentation."""

PACKAGE_WIDE = frozenset(name for name, spec in AMD_FIELDS.items() if spec.metric in (m.GPU_POWER, m.GPU_ENERGY))
"""The exporter's fields AMD reports once per package (socket power, the energy counter)."""


AMD_LABELS = ("gpu", "UUID", "modelName", "hpc_job", "namespace", "pod", "partition", "partition_type", "serial")
"""The canonical names :func:`canonical_labels` gives: dcgm-exporter's for what both exporters have, and
``partition`` (``gpu_partition_id``), ``partition_type`` (``gpu_compute_partition_type``) and ``serial``
(``serial_number``, the board's: the same on every device of one package)."""


def canonical_labels(labels: Mapping[str, str], names: Mapping[str, str]) -> dict[str, str]:
    """An exporter series' labels under the canonical names of :data:`AMD_LABELS` (only those it has, empty ones
    left out): ``names`` maps a canonical name to the site's label (``gpu`` → ``gpu_id``); the model is the first
    non-empty of the ``modelName`` label and ``card_model``, named as a partition of it on a partitioned MI300X
    (:func:`finops.pricing.package_share.partition_name`: "AMD Instinct MI300X OAM (CPX partition 1/8)", priced at
    1/8 of the MI300X)."""
    found = {canonical: labels[site] for canonical, site in names.items() if labels.get(site)}
    if "modelName" not in found and labels.get("card_model"):
        found["modelName"] = labels["card_model"]
    if "modelName" in found:
        found["modelName"] = partition_name(found["modelName"], found.get("partition_type", ""))
    return found


def reports_package(canonical: Mapping[str, str]) -> bool:
    """Whether a device (its :func:`canonical_labels`) is the one that reports its package's power and energy: every
    device but the partitions other than 0 of a partitioned MI300X (an MI250X's second die exports no such series).
    """
    mode = canonical.get("partition_type", "").lower()
    return mode not in PARTITIONED_MODES or canonical.get("partition", "0") == "0"


@dataclass(frozen=True, slots=True)
class PackageLabels:
    """What the exporter's labels say of a device's package: the board serial (``serial_number``, shared by the
    devices of one package), the compute partition mode (lower case, '' if none), the partition id ('' if none) and
    how many devices the package shows by its make (:func:`collector.contract.partitions.package_devices`: 8 for an
    MI300X in CPX mode, 2 for an MI250X; None where the make does not say)."""

    serial: str
    mode: str
    partition: str
    devices: int | None = None

    @classmethod
    def of(cls, canonical: Mapping[str, str]) -> PackageLabels | None:
        """From a device's :func:`canonical_labels`; None without a serial number (no package is known)."""
        serial = canonical.get("serial", "")
        if not serial:
            return None
        mode = canonical.get("partition_type", "").lower()
        return cls(serial, mode, canonical.get("partition", ""), package_devices(canonical.get("modelName", ""), mode))

    @property
    def key(self) -> tuple[str, str]:
        """The package's devices share it: its serial and mode (a mode change shows the board as other devices)."""
        return (self.serial, self.mode)

    def count(self, seen: int) -> int:
        """The package's device count ``n``: :attr:`devices` where its make says it, else the ``seen`` devices."""
        return self.devices or seen


def marked_by_hour(samples: Sequence[Sample], packages: Mapping[str, PackageLabels]) -> list[list[Sample]]:
    """The readings of one node in one pull window (``samples``, in time order per device) marked by
    :func:`mark_packages`, in runs of consecutive UTC hours in which each device is marked alike (one ingest batch
    each: a batch names each device's package once, :func:`collector.contract.wire.batch_dict`).

    The package's device count and what it reports as a total (power, the energy counter:
    :data:`~collector.contract.wire.PACKAGE_SUMMED_FIELDS`) are the window's, so that each device's share of the
    counter keeps one divisor over the window. What it reports as a mean (activity:
    :data:`~collector.contract.wire.PACKAGE_MEAN_FIELDS`) is decided per hour of the window, as the TSDB metering
    decides it (:mod:`finops.ingest.tsdb_packages`): a window that spans an exporter upgrade, after which each
    partition has its own activity, still shares partition 0's in the hours before it. A window whose hours are
    marked alike is one run, as is a node without a device of a package."""
    if not any(sample.labels["uuid"] in packages for sample in samples):
        return [list(samples)]
    window = mark_packages(samples, packages)
    hours: dict[int, list[int]] = defaultdict(list)
    for index, sample in enumerate(samples):
        hours[floor_hour(to_epoch(sample.timestamp))].append(index)
    runs: list[list[Sample]] = []
    run_marks: dict[str, Package | None] = {}  # the run's device → its package, as its batch names it
    for hour in sorted(hours):
        indexes = hours[hour]
        hourly = mark_packages([samples[index] for index in indexes], packages)
        marked = [_hour_means(window[index], of_hour) for index, of_hour in zip(indexes, hourly, strict=True)]
        marks = {sample.labels["uuid"]: sample.package for sample in marked}
        if runs and all(run_marks.get(uuid, package) == package for uuid, package in marks.items()):
            runs[-1].extend(marked)
            run_marks.update(marks)
        else:
            runs.append(marked)
            run_marks = marks
    return runs


def _hour_means(window: Sample, hour: Sample) -> Sample:
    """``window`` (a reading marked over its window) with the mean fields of its package those that ``hour`` (the
    same reading marked over its hour) reports."""
    if window.package is None:
        return window
    means = hour.package.fields if hour.package is not None else ()
    fields = tuple(name for name in window.package.fields if name in PACKAGE_SUMMED_FIELDS)
    fields += tuple(name for name in means if name not in PACKAGE_SUMMED_FIELDS)
    return (
        window if fields == window.package.fields else replace(window, package=replace(window.package, fields=fields))
    )


def mark_packages(samples: Sequence[Sample], packages: Mapping[str, PackageLabels]) -> list[Sample]:
    """``samples`` (the readings of one node in one pull window, or in one hour of it: :func:`marked_by_hour`) with
    :attr:`Sample.package` set on the devices of a package (``packages``: UUID -> its :class:`PackageLabels`), as the
    amdsmi collector source marks them.

    A package is the devices of the node with one serial number and mode; ``devices``, the count its shares are
    ``1 / n`` of, is the package's by its make (:attr:`PackageLabels.devices`: 8 for an MI300X in CPX mode, 2 for
    an MI250X), else the devices seen in the window. So a device missing from the window changes no one's share:
    its own share of the package's power is not stored for the instants it has no reading, and its share of the
    energy counter is carried by its next reading (the increment from its last one, as for any gap of its readings;
    over more than an hour the ledger leaves the increment out, and that device's hours show no energy, not 0).
    What the package reports once, each field named by the device that reports it (:attr:`Package.fields`):

    - a partitioned MI300X (:data:`~collector.contract.partitions.PARTITIONED_MODES`): each field of
      :data:`~collector.contract.partitions.PARTITION_PACKAGE_FIELDS` that partition 0 has in the window and no other
      partition has. Socket power and energy are always so (the other partitions' series are not read,
      :func:`reports_package`); activity is so only where the exporter gives it on partition 0 alone (exporters from
      1.3.1 give each partition its own, ROCm/device-metrics-exporter issue 139, and it stays each partition's);
    - two dies (MI250X, MI250): each field of :data:`~collector.contract.partitions.DIE_PACKAGE_FIELDS` that exactly
      one die has, a die whose power or energy values in the window are all 0 not counting (the secondary die reads
      0, Linux amdgpu aldebaran_ppt.c); where each die has its own, each keeps it.

    The samples' values are unchanged: ingest replaces the other devices' values of a package field by their share
    (:func:`finops.ingest.package_split.split_packages`)."""
    members: dict[tuple[str, str], set[str]] = {}
    for sample in samples:
        labels = packages.get(sample.labels["uuid"])
        if labels is not None:
            members.setdefault(labels.key, set()).add(sample.labels["uuid"])
    devices = {key: packages[min(uuids)].count(len(uuids)) for key, uuids in members.items()}
    fields: dict[str, list[str]] = {}
    for key, uuids in members.items():
        if devices[key] > 1:
            for name, uuid in _package_fields(samples, uuids, packages):
                fields.setdefault(uuid, []).append(name)
    marked = []
    for sample in samples:
        uuid = sample.labels["uuid"]
        labels = packages.get(uuid)
        if labels is None or devices[labels.key] < 2:
            marked.append(sample)
            continue
        package = Package(labels.serial, devices[labels.key], tuple(fields.get(uuid, ())))
        marked.append(replace(sample, package=package))
    return marked


def _package_fields(
    samples: Sequence[Sample], uuids: set[str], packages: Mapping[str, PackageLabels]
) -> list[tuple[str, str]]:
    """(wire field, UUID of the device reporting it for the package) for one package's devices ``uuids`` (the rule
    of :func:`mark_packages`)."""
    partitioned = any(packages[uuid].mode in PARTITIONED_MODES for uuid in uuids)
    found = []
    for name in PARTITION_PACKAGE_FIELDS if partitioned else DIE_PACKAGE_FIELDS:
        metric = PACKAGE_FIELD_METRICS[name]
        having = {
            sample.labels["uuid"]
            for sample in samples
            if sample.labels["uuid"] in uuids
            and sample.values.get(metric) is not None
            and (name not in PACKAGE_SUMMED_FIELDS or sample.values[metric] != 0)
        }
        if len(having) != 1:
            continue
        (uuid,) = having
        if not partitioned or packages[uuid].partition == "0":
            found.append((name, uuid))
    return found
