"""AMD packages in the TSDB metering: which device's energy counter is its package's, and over how many devices the
counter's increase is split, by ingest's rule (:mod:`finops.ingest.package_split`).

An MI300-series GPU in a partitioned mode reports its energy counter on partition 0 only, an MI250X on one of its two
dies (:mod:`collector.contract.partitions`). In the TSDB metering each device's segments are cut at its own
allocations' bounds, so the devices of one package are not cut alike. The rule: for each segment [a, b) of each
device of a package of ``n`` devices, the device's energy is the increase of the package's counter over [a, b) (read
from the reporting device's series as a device's own counter is read, :class:`finops.ingest.tsdb_metering.TsdbMeter`)
divided by ``n``. A device's segments tile its hour, so its energy over the hour is ``1 / n`` of the counter's
increase, and the package's ``n`` devices add up to the increase, counted once, however each device is cut. It is the
pull's rule: there each device's counter share is ``1 / n`` of the package's counter at every reading.

``n`` is the package's by its make (:attr:`finops.ingest.amd_exporter.PackageLabels.devices`: 8 for an MI300X in
CPX mode, 2 for an MI250X), else the devices seen in the hour. A device of the package is known to the hour by any
of its AMD series in it; its segments with no readings of their own still get their share. A device with no series
in the whole hour is not known to be the package's there: its share of the hour is stored on no device (its hour
has no metering: not measured), never moved to the others.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from finops.ingest.amd_exporter import PackageLabels


@dataclass(frozen=True, slots=True)
class PackageEnergy:
    """One package's energy split: ``reporter`` (``gpus.id``) reports its counter, each of ``members`` (the
    package's devices known to the hour, ``gpus.id``, the reporter included) gets ``1 / devices`` of its increase."""

    reporter: int
    devices: int
    members: tuple[int, ...]


def package_energy(labels: Mapping[int, Mapping[str, str]], counters: Mapping[int, float]) -> dict[int, PackageEnergy]:
    """Per reporting device (``gpus.id``), its package's :class:`PackageEnergy`.

    ``labels``: per device seen in the hour, its canonical labels (:meth:`finops.ingest.prometheus.LabelNames.
    canonical`); devices without a serial number are no package's. ``counters``: per device, the most of its energy
    counter in the hour (µJ), of the series read as a package's (:func:`finops.ingest.amd_exporter.reports_package`).
    A package's devices share a serial number and mode; it reports its counter on the one device whose counter is
    not 0 all the hour (an MI250X's second die reads 0). Where no device or several do, or the package is one
    device, nothing is split: each device keeps its own counter, as ingest keeps it
    (:func:`finops.ingest.amd_exporter.mark_packages`)."""
    members: dict[tuple[str, str], list[tuple[int, PackageLabels]]] = defaultdict(list)
    for gpu_id, canonical in labels.items():
        package = PackageLabels.of(canonical)
        if package is not None:
            members[package.key].append((gpu_id, package))
    found = {}
    for devices in members.values():
        reporting = [gpu_id for gpu_id, _ in devices if counters.get(gpu_id, 0.0) > 0]
        n = devices[0][1].count(len(devices))
        if len(reporting) == 1 and n > 1:
            found[reporting[0]] = PackageEnergy(reporting[0], n, tuple(sorted(gpu_id for gpu_id, _ in devices)))
    return found


def reporters(uuids: Sequence[str], reporter_of: Mapping[str, str]) -> tuple[str, ...]:
    """``uuids`` each in place of the device reporting its package's energy counter (``reporter_of``: UUID → the
    reporter's UUID; a GPU not in it stands for itself), once each: the GPUs whose counter is read over a segment
    cut for ``uuids``."""
    return tuple(dict.fromkeys(reporter_of.get(uuid, uuid) for uuid in uuids))
