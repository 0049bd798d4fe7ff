"""Telemetry sources: one module per source, each a :class:`collector.contract.sample.Source`."""
