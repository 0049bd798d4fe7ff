"""Raw GPU readings: the idempotent store of collector batches, the pull from a Prometheus that scrapes
dcgm-exporter, and the day partitions and retention of ``gpu_samples``."""
