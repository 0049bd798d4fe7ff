"""AMD packages in the TSDB metering: which device reports what its package reports once (the energy counter; the
activity of a partitioned GPU whose other partitions have none), and how it is shared over the package's devices, by
ingest's rules (:mod:`finops.ingest.package_split`).

An MI300-series GPU in a partitioned mode reports its energy counter on partition 0 only, an MI250X on one of its two
dies (:mod:`collector.contract.partitions`). In the TSDB metering each device's segments are cut at its own
allocations' bounds, so the devices of one package are not cut alike. What the reporting device reports is therefore
read from its series over every segment of each device of its package (:func:`read_on_reporters`), and each device
gets, per segment [a, b) of its own:

- energy: the increase of the package's counter over [a, b) (read as a device's own counter is read,
  :class:`finops.ingest.tsdb_metering.TsdbMeter`) divided by ``n``. A device's segments tile its hour, so its energy
  over the hour is ``1 / n`` of the counter's increase, and the package's ``n`` devices add up to the increase,
  counted once, however each device is cut. It is the pull's rule for a total: there each device's counter share is
  ``1 / n`` of the package's counter at every reading;
- utilisation (``gpu_gfx_activity``) where partition 0 of a partitioned GPU has it in the hour and no other partition
  has (exporters before 1.3.1; amd-smi reports activity per GPU): partition 0's readings over [a, b), their count and
  sum as they are. It is the pull's rule for a mean: there each device's reading holds the package's value at every
  instant partition 0 reported one, so the devices' mean is the package's, and a partition billed as ``1 / n`` of the
  package is billed ``1 / n`` of its used time.

``n`` is the package's by its make (:attr:`finops.ingest.amd_exporter.PackageLabels.devices`: 8 for an MI300X in
CPX mode, 2 for an MI250X), else the devices seen in the hour. A device of the package is known to the hour by any
of its AMD series in it; its segments with no readings of their own still get their share. A device with no series
in the whole hour is not known to be the package's there: its share of the hour is stored on no device (its hour
has no metering: not measured), never moved to the others.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass

from collector.contract.partitions import PARTITIONED_MODES
from finops.ingest.amd_exporter import PackageLabels
from finops.ingest.tsdb_terms import Term, narrowed


@dataclass(frozen=True, slots=True)
class PackageReport:
    """What one device reports for its package: ``reporter`` (``gpus.id``) reports it for each of ``members`` (the
    package's devices known to the hour, ``gpus.id``, the reporter included); ``devices``: the package's ``n``."""

    reporter: int
    devices: int
    members: tuple[int, ...]


def _packages(labels: Mapping[int, Mapping[str, str]]) -> list[list[tuple[int, PackageLabels]]]:
    """The devices of ``labels`` (per device seen in the hour, ``gpus.id`` → its canonical labels,
    :meth:`finops.ingest.prometheus.LabelNames.canonical`) grouped by package: they share a serial number and mode.
    Devices without a serial number are no package's."""
    members: dict[tuple[str, str], list[tuple[int, PackageLabels]]] = defaultdict(list)
    for gpu_id, canonical in labels.items():
        package = PackageLabels.of(canonical)
        if package is not None:
            members[package.key].append((gpu_id, package))
    return list(members.values())


def _report(reporter: int, devices: list[tuple[int, PackageLabels]]) -> PackageReport:
    return PackageReport(reporter, devices[0][1].count(len(devices)), tuple(sorted(gpu_id for gpu_id, _ in devices)))


def package_energy(labels: Mapping[int, Mapping[str, str]], counters: Mapping[int, float]) -> dict[int, PackageReport]:
    """Per device (``gpus.id``) reporting its package's energy counter, its :class:`PackageReport`.

    ``labels``: per device seen in the hour, its canonical labels. ``counters``: per device, the most of its energy
    counter in the hour (µJ), of the series read as a package's (:func:`finops.ingest.amd_exporter.reports_package`).
    A package reports its counter on the one device whose counter is not 0 all the hour (an MI250X's second die reads
    0). Where no device or several do, or the package is one device, nothing is split: each device keeps its own
    counter, as ingest keeps it (:func:`finops.ingest.amd_exporter.mark_packages`)."""
    found = {}
    for devices in _packages(labels):
        reporting = [gpu_id for gpu_id, _ in devices if counters.get(gpu_id, 0.0) > 0]
        report = _report(reporting[0], devices) if len(reporting) == 1 else None
        if report is not None and report.devices > 1:
            found[report.reporter] = report
    return found


def package_activity(labels: Mapping[int, Mapping[str, str]], having: Set[int]) -> dict[int, PackageReport]:
    """Per partition 0 (``gpus.id``) reporting its package's utilisation, its :class:`PackageReport`: of a package of
    several devices in a partitioned mode (:data:`~collector.contract.partitions.PARTITIONED_MODES`), the devices
    ``having`` the utilisation series in the hour are partition 0 alone, as :func:`finops.ingest.amd_exporter.
    marked_by_hour` marks an hour of a pull window's. Where other partitions have their own, each keeps its own."""
    found = {}
    for devices in _packages(labels):
        reporting = [(gpu_id, package) for gpu_id, package in devices if gpu_id in having]
        partitioned = any(package.mode in PARTITIONED_MODES for _, package in devices)
        if partitioned and len(reporting) == 1 and reporting[0][1].partition == "0":
            report = _report(reporting[0][0], devices)
            if report.devices > 1:
                found[report.reporter] = report
    return found


def read_on_reporters(
    terms: Sequence[Term], reports: Mapping[int, PackageReport], having: Set[int], uuids: Mapping[int, str]
) -> list[Term]:
    """The terms a series is asked over: ``terms`` for the GPUs ``having`` it in the hour (``gpus.id``), each device
    of a package of ``reports`` (per reporter, :func:`package_energy`, :func:`package_activity`) in place of the
    package's reporter, so that its series is read over every segment of any of its devices. ``uuids``: ``gpus.id``
    → UUID of the GPUs known."""
    reporter_of = {uuids[member]: uuids[report.reporter] for report in reports.values() for member in report.members}
    kept = {uuids[gpu_id] for gpu_id in having} - set(reporter_of) | set(reporter_of.values())
    via = (Term(t.a, t.b, tuple(dict.fromkeys(reporter_of.get(uuid, uuid) for uuid in t.uuids))) for t in terms)
    return narrowed(list(dict.fromkeys(via)), kept)
