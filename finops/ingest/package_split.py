"""Splitting what a GPU package reports once over the devices it shows as, before the readings are stored.

An AMD Instinct MI250X shows as two devices (GCDs) and reports its socket power and energy on one of them; an
MI300-series GPU in DPX, TPX, QPX or CPX mode shows as 2, 3, 4 or 8 compute partitions and reports activity, power and
energy on partition 0 only. The collector marks the device that reports a package's value
(:attr:`collector.contract.wire.GpuInfo.package_fields`) and leaves the others null. Stored as sent, the package's
energy would all be billed to one device and the others would have none; copied to every device, it would be counted
once per device.

The rule, per package named in a batch's ``gpus`` (the devices sharing a ``package_id``), ``n`` being the reporting
device's ``package_devices``, for each of its ``package_fields`` and each instant it reported a value ``v``:

- a total (:data:`~collector.contract.wire.PACKAGE_SUMMED_FIELDS`: watts, the joules counter) becomes ``v / n`` on
  every device of the package, itself included: the devices' shares add up to the package's value, and each
  device's counter increases by ``1 / n`` of the package's increase (a reset or wrap of the package's counter is a
  reset of every share, which the ledger's metering reads as such);
- a mean (:data:`~collector.contract.wire.PACKAGE_MEAN_FIELDS`: ratios) becomes ``v`` on every device: their mean is
  the package's, and a device billed as ``1 / n`` of the package is billed ``1 / n`` of its used time.

Devices are equal shares: MI300-series partitions of one mode are equal slices of the GPU (its XCDs in 2, 3, 4 or
one-XCD groups), MI250X GCDs equal halves. A device's share at an instant goes on its own reading at that instant; a
device without a reading then gets none (for the energy counter, its next reading carries the increase). What the
package did not report stays null on every device, never 0. Values a non-reporting device sent for those fields are
replaced by its share, so a package value is never counted twice.
"""

from __future__ import annotations

from collections.abc import Iterable

from collector.contract.wire import PACKAGE_SUMMED_FIELDS, GpuInfo, GpuReading, GpuSeries, IngestBatch
from finops.timeutil import to_epoch


def _reported(batch: IngestBatch, uuid: str, name: str) -> dict[int, float]:
    """Epoch second -> the value of reading field ``name`` of the device ``uuid`` in ``batch`` (series and rows)."""
    values: dict[int, float] = {}
    for series in batch.series:
        column = getattr(series, name) if series.uuid == uuid else None
        if column is not None:
            values.update((ts, value) for ts, value in zip(series.ts, column, strict=True) if value is not None)
    for reading in batch.samples:
        value = getattr(reading, name) if reading.uuid == uuid else None
        if value is not None:
            values[to_epoch(reading.ts)] = value
    return values


def _shares(batch: IngestBatch, reporter: GpuInfo) -> dict[str, dict[int, float]]:
    """Reading field -> epoch second -> each device's share of the package's value (the rule above)."""
    devices = reporter.package_devices or 1
    shares = {}
    for name in reporter.package_fields or ():
        values = _reported(batch, reporter.uuid, name)
        if name in PACKAGE_SUMMED_FIELDS:
            values = {ts: value / devices for ts, value in values.items()}
        shares[name] = values
    return shares


def _series(series: GpuSeries, shares: dict[str, dict[int, float]]) -> GpuSeries:
    return series.model_copy(update={name: [by_ts.get(ts) for ts in series.ts] for name, by_ts in shares.items()})


def _row(reading: GpuReading, shares: dict[str, dict[int, float]]) -> GpuReading:
    ts = to_epoch(reading.ts)
    return reading.model_copy(update={name: by_ts.get(ts) for name, by_ts in shares.items()})


def split_packages(batch: IngestBatch) -> IngestBatch:
    """``batch`` with each package's values split over its devices (the rule above); ``batch`` itself when it names
    no device reporting for its package. The readings' count and instants are unchanged."""
    reporters = [gpu for gpu in batch.gpus if gpu.package_fields]
    if not reporters:
        return batch
    by_uuid: dict[str, dict[str, dict[int, float]]] = {}
    for reporter in reporters:
        shares = _shares(batch, reporter)
        for uuid in _members(batch.gpus, reporter):
            by_uuid.setdefault(uuid, {}).update(shares)
    series = [_series(s, by_uuid[s.uuid]) if s.uuid in by_uuid else s for s in batch.series]
    samples = [_row(r, by_uuid[r.uuid]) if r.uuid in by_uuid else r for r in batch.samples]
    return batch.model_copy(update={"series": series, "samples": samples})


def _members(gpus: Iterable[GpuInfo], reporter: GpuInfo) -> set[str]:
    """UUIDs of the devices of ``reporter``'s package (its own included)."""
    return {gpu.uuid for gpu in gpus if gpu.package_id == reporter.package_id} | {reporter.uuid}
