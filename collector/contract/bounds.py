"""The bounds of the wire format's values (:mod:`collector.contract.wire`): numbers that are JSON numbers, within
what a column holds and what the collectors' sources can report (watts, joules, hertz, °C, bytes per second), and
text without NUL.

Each is a pydantic ``Annotated`` type or the constant it is bounded by; the service checks its own inputs with some
of them too (:mod:`finops.web.deps`: :data:`INT32_MAX`, :data:`NUL_REFUSED`; job ids: :data:`JOB_ID_MAX_LENGTH`).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field, Strict

from collector.contract.node_io import MAX_NODE_IO_BYTES_PER_SECOND

INT32_MAX = 2**31 - 1
"""Largest value of a 32-bit signed integer column (PostgreSQL ``integer``): a GPU index, a row id."""
INT64_MAX = 2**63 - 1
"""Largest value of a 64-bit signed integer column (``bigint``): byte counts, counters."""
LAST_EPOCH_SECOND = 253_402_300_799  # 9999-12-31T23:59:59Z, the last instant a datetime can hold


# Numbers are JSON numbers (Strict): ``true`` is not 1, ``"5"`` is not 5, ``2.5`` is not an integer.
Number = Annotated[float, Strict()]
Integer = Annotated[int, Strict()]
Ratio = Annotated[Number, Field(ge=0, le=1)]
Count = Annotated[Integer, Field(ge=0, le=INT64_MAX)]
UINT32_MAX = 2**32 - 1
MAX_POWER_WATTS = UINT32_MAX / 1000
"""Largest ``power_watts``: NVML's milliwatts in an unsigned 32-bit integer (``nvmlDeviceGetPowerUsage``), the widest
of the collectors' sources (AMD SMI's socket power is a 16-bit count of watts). No driver reports more; a larger
finite number (up to 1.8e308) made the dashboards' sums and means of power overflow PostgreSQL's double precision,
failing the page of every node."""
MAX_ENERGY_JOULES = 2**64 / 1000
"""Largest ``energy_joules``: NVML's energy counter, millijoules in an unsigned 64-bit integer
(``nvmlDeviceGetTotalEnergyConsumption``; AMD SMI's 64-bit accumulator of 15.3 µJ counts stays below it)."""
MAX_CLOCK_HERTZ = UINT32_MAX * 1e6
"""Largest ``sm_clock_hertz``: a clock in MHz in an unsigned 32-bit integer, as NVML (``nvmlDeviceGetClockInfo``) and
AMD SMI (``clk``) report it."""
ABSOLUTE_ZERO_CELSIUS = -273.15
"""Lowest ``temperature_celsius``; the highest is :data:`UINT32_MAX`, NVML's unsigned 32-bit degrees
(``nvmlDeviceGetTemperature``)."""
Watts = Annotated[Number, Field(ge=0, le=MAX_POWER_WATTS)]
Joules = Annotated[Number, Field(ge=0, le=MAX_ENERGY_JOULES)]
Hertz = Annotated[Number, Field(ge=0, le=MAX_CLOCK_HERTZ)]
Celsius = Annotated[Number, Field(ge=ABSOLUTE_ZERO_CELSIUS, le=UINT32_MAX)]
NUL_REFUSED = "holds a NUL character (U+0000), which no text may (PostgreSQL cannot store one)"
"""Why a text with NUL is refused, by ingest and the REST API alike (:mod:`finops.web.deps`): no name, id or
matcher has one, and PostgreSQL's ``text`` cannot hold it (it fails the statement, while SQLite would store it)."""


def _without_nul(text: str) -> str:
    if "\x00" in text:
        raise ValueError(NUL_REFUSED)
    return text


Text = Annotated[str, AfterValidator(_without_nul)]
"""Text of the format: no NUL character (PostgreSQL's text cannot hold one: the insert failed, a 500 that the
collector retried for ever; SQLite stored it)."""
EpochSecond = Annotated[Integer, Field(ge=0, le=LAST_EPOCH_SECOND)]
JOB_ID_MAX_LENGTH = 317
"""Longest job id: a Kubernetes ``namespace/pod`` (namespace a DNS label of at most 63 characters, pod name a
DNS subdomain of at most 253; Kubernetes "Object Names and IDs"); Slurm ids are far shorter."""
JobId = Annotated[Text, Field(max_length=JOB_ID_MAX_LENGTH)]
NodeRate = Annotated[Number, Field(ge=0, le=MAX_NODE_IO_BYTES_PER_SECOND)]
"""A node's fabric or storage rate, bytes per second (:class:`collector.contract.wire.NodeIo`)."""
