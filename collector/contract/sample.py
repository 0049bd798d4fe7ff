"""The unit of data every collector source produces."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class Sample:
    """One reading of one entity (a GPU, a block device, ...) at one instant.

    Attributes:
        entity: kind of thing read, ``"gpu"`` or ``"disk"``.
        labels: identifies the entity, Prometheus label names to values. GPUs carry ``gpu`` (NVML index as a
            string), ``uuid`` (NVML UUID, ``GPU-…``) and ``model`` (NVML product name); disks carry ``device``.
        values: metric name (a ``gpufinops_`` name from :mod:`collector.contract.metric_names`) to value in base units
            (ratios 0..1, bytes, watts, joules, degrees Celsius, hertz). A metric the device does not support
            is absent, never 0.
        timestamp: when it was read, timezone-aware UTC.
        job_id: the scheduler job holding the entity at ``timestamp`` when known (Slurm ``JobIDRaw``).
        package: for a GPU that is one device of a physical package the library shows as several (an MI250X
            GCD, an MI300X compute partition), which package and what this device reads for all of it
            (:class:`Package`); None for a whole GPU.
    """

    entity: str
    labels: dict[str, str]
    values: dict[str, float]
    timestamp: datetime
    job_id: str | None = None
    package: Package | None = None
    __hash__ = None  # type: ignore[assignment]  # dict fields: a Sample is a value, not a key


@dataclass(frozen=True, slots=True)
class Package:
    """The physical package a GPU device belongs to, when the package shows as several devices.

    Attributes:
        id: the same text for every device of one package on the node (the board's serial number).
        devices: how many devices of the package the node shows (2 GCDs of an MI250X; 1, 2, 4 or 8 partitions of
            an MI300X); each is ``1 / devices`` of the package.
        fields: the wire reading fields (:data:`collector.contract.wire.PACKAGE_FIELDS`) this device reports for
            the whole package; the other devices of the package leave them out. Empty: the device reports only
            its own readings.
    """

    id: str
    devices: int
    fields: tuple[str, ...] = ()


class Source(Protocol):
    """A telemetry source: one file in :mod:`collector.sources`, one ``collect`` method.

    ``name`` is the ``source`` label of ``gpufinops_collector_source_success``. ``collect`` returns the
    readings of one cycle; a device class that is absent on this host returns ``[]``; a real failure raises
    (the agent records it and carries on with the other sources).
    """

    name: str

    def collect(self) -> list[Sample]: ...


@runtime_checkable
class Closable(Protocol):
    """A source that holds resources until the collector stops (NVML and its GPM samples): ``close`` frees them."""

    def close(self) -> None: ...


def utc_now() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)
