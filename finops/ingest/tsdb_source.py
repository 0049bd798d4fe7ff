"""Raw telemetry kept in a Prometheus-compatible TSDB (``FINOPS_TELEMETRY_SOURCE=tsdb``): what the scheduler's rollup
reads from it instead of ``gpu_samples``.

:class:`TsdbTelemetry` bundles the TSDB's client (Prometheus HTTP API,
:class:`finops.ingest.prometheus.PrometheusClient`) with the series' selector and label names
(:class:`finops.ingest.prometheus_pull.PullOptions`, as for the Prometheus pull) and gives the ledger's
metering (:class:`finops.ingest.tsdb_metering.TsdbMeter`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from finops.ingest.prometheus import PrometheusClient
from finops.ingest.prometheus_pull import PullOptions
from finops.ingest.tsdb_metering import TsdbMeter


@dataclass(frozen=True, slots=True)
class TsdbTelemetry:
    """The TSDB at ``client`` as the service's telemetry source; ``options``: its series' selector, label names,
    utilisation field and readings' step (seconds)."""

    client: PrometheusClient
    options: PullOptions = field(default_factory=PullOptions)

    @property
    def meter(self) -> TsdbMeter:
        """The rollup's ``meter=`` (:func:`finops.ledger.rollup.rollup`) for this TSDB."""
        return TsdbMeter(self.client, self.options)
