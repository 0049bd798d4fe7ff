"""GPU readings scraped from a dcgm-exporter sidecar's ``/metrics`` (Prometheus text, parsed with prometheus_client).

dcgm-exporter (NVIDIA/dcgm-exporter) names each series after its DCGM field (``DCGM_FI_DEV_POWER_USAGE``) in the
field's own unit, as its counters CSV documents (``default-counters.csv``: W, MHz, °C, MiB, %, mJ, µs). The
declarative :data:`FIELDS` table maps each field we use to our metric and scale; :data:`IGNORED` lists the
fields we deliberately do not map. Anything else is ignored too (logged once at DEBUG).

Hardware activity: the profiling ratio fields (``DCGM_FI_PROF_SM_ACTIVE``, or its DCGM 4.6 name
``DCGM_FI_PROF_SM_UTIL_RATIO``, ...) are DCGM's averages over its sampling window. Where the sidecar also exports
DCGM 4.6's cycle counters (:data:`CYCLE_COUNTERS`, :data:`SM_CYCLES_ELAPSED`), the mean since the previous scrape
(:class:`collector.sources.dcgm_cycles.CycleMeans`) replaces the ratio field's value; on the first scrape or after
a counter reset the counters give nothing and the ratio field, if exported, stands.

GPU identity from dcgm-exporter's labels: ``gpu`` (index), ``UUID``, ``modelName``; for a MIG instance also
``GPU_I_PROFILE`` and ``GPU_I_ID``. DCGM labels a MIG instance with its parent's UUID, so the instance's ``uuid``
is ``<parent UUID>/<GPU_I_ID>``, its ``parent_uuid`` the parent's and its ``mig_profile`` ``GPU_I_PROFILE``.
Job mapping: an ``hpc_job`` label (``--hpc-job-mapping-dir``) becomes :attr:`Sample.job_id`; without it, the
Kubernetes ``namespace`` and ``pod`` labels (``--kubernetes``) give ``<namespace>/<pod>``. Neither is exposed as a
label of ours.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from datetime import datetime

import httpx
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from collector.contract import metric_names as m
from collector.contract.dcgm_fields import (
    CYCLE_COUNTERS,
    FIELDS,
    IGNORED,
    SM_CYCLES_ELAPSED,
    fill_memory_total,
    gpu_labels,
    job_of,
)
from collector.contract.sample import Sample, utc_now
from collector.sources.dcgm_cycles import CycleMeans

log = logging.getLogger(__name__)


class DcgmSource:
    """One ``entity="gpu"`` sample per GPU or MIG instance that dcgm-exporter reports.

    Args:
        url: dcgm-exporter's ``/metrics`` (default ``http://127.0.0.1:9400/metrics``).
        client: the ``httpx.Client`` (tests inject a MockTransport); default one with ``timeout_seconds``.
        clock: the time of a reading, timezone-aware UTC.

    Errors: a transport error, a non-200 answer or a body with no DCGM series raises (the agent records the
    source as failed). A malformed line is logged with its line number and skipped; the other lines are read.
    """

    name = "dcgm"

    def __init__(
        self,
        url: str = "http://127.0.0.1:9400/metrics",
        client: httpx.Client | None = None,
        clock: Callable[[], datetime] = utc_now,
        timeout_seconds: float = 5.0,
    ) -> None:
        self.url = url
        self._client = client or httpx.Client(timeout=timeout_seconds)
        self._clock = clock
        self._unmapped_logged: set[str] = set()
        self._cycles: CycleMeans[tuple[str, str, str]] = CycleMeans()

    def collect(self) -> list[Sample]:
        """Samples of every GPU in the sidecar's current scrape."""
        response = self._client.get(self.url)
        if response.status_code != 200:
            raise RuntimeError(f"{self.url}: HTTP {response.status_code}")
        timestamp = self._clock()
        gpus: dict[tuple[str, str, str], tuple[dict[str, str], dict[str, float], str | None]] = {}
        free: dict[tuple[str, str, str], float] = {}
        counters: dict[tuple[str, str, str], dict[str, float]] = {}
        seen_dcgm = False
        for name, labels, value in self._series(response.text):
            if not name.startswith("DCGM_FI_"):
                continue
            seen_dcgm = True
            if "UUID" not in labels or "gpu" not in labels:
                continue
            key = (labels["gpu"], labels["UUID"], labels.get("GPU_I_ID", ""))
            if key not in gpus:
                gpus[key] = (gpu_labels(labels), {m.GPU_UP: 1.0}, job_of(labels))
            field = FIELDS.get(name)
            if field is not None:
                gpus[key][1][field.metric] = float(value) * field.scale
            elif name in CYCLE_COUNTERS or name == SM_CYCLES_ELAPSED:
                counters.setdefault(key, {})[name] = value
            elif name == "DCGM_FI_DEV_FB_FREE":
                free[key] = value
            elif name not in IGNORED and name not in self._unmapped_logged:
                log.debug("%s: DCGM field not mapped", name)
                self._unmapped_logged.add(name)
        if not seen_dcgm:
            raise RuntimeError(f"{self.url}: no DCGM_FI_ series in the answer")
        for key, means in self._cycles.update(counters).items():
            gpus[key][1].update(means)
        samples = []
        for key, (labels, values, job) in gpus.items():
            fill_memory_total(values, free.get(key))
            samples.append(Sample("gpu", labels, values, timestamp, job_id=job))
        return samples

    def _series(self, text: str) -> Iterator[tuple[str, dict[str, str], float]]:
        """(name, labels, value) of every sample; on a parse error, line by line, skipping (and logging) bad ones."""
        try:
            families = list(text_string_to_metric_families(text))
        except ValueError:
            yield from self._series_by_line(text)
            return
        for family in families:
            yield from _field_samples(family)

    def _series_by_line(self, text: str) -> Iterator[tuple[str, dict[str, str], float]]:
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip() or line.startswith("#"):
                continue
            try:
                for family in text_string_to_metric_families(line + "\n"):
                    yield from _field_samples(family)
            except ValueError as exc:
                log.warning("%s line %d: unparsable, skipped: %s", self.url, number, exc)


def _field_samples(family: Metric) -> Iterator[tuple[str, dict[str, str], float]]:
    """(DCGM field, labels, value) of a family: the field is the family's name (the parser appends ``_total`` to
    the samples of a family typed counter, such as DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION)."""
    for sample in family.samples:
        yield family.name, sample.labels, sample.value
