"""Telemetry sources: one module per source, each a :class:`collector.sample.Source`."""
