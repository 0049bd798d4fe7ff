"""What the collector and the service agree on, importable by both without the other's code: the ingest wire
format, the Sample unit, metric names, the DCGM field table, clocks-event reasons and Retry-After parsing.

Nothing here imports the rest of the collector."""
