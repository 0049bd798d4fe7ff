"""GPU readings from ``nvidia-smi --query-gpu=… --format=csv``, for hosts without the Python NVML binding.

nvidia-smi runs on this source's own timer thread with a timeout, never in ``collect``: ``collect`` returns the
latest successful run. Fields and units are those of ``nvidia-smi --help-query-gpu``; values are converted to
the same base units as :mod:`collector.sources.nvml` (% -> ratio, MiB -> bytes, MHz -> Hz, µs -> s, the hex
``clocks_event_reasons.active`` bitmask -> int). Unavailable values (``[N/A]``, ``[Not Supported]``,
``[Unknown Error]``, ``[Insufficient Permissions]``, ``[Requested functionality has been deprecated]``) leave
their series out. nvidia-smi has no energy counter field, so this source reports power but no energy.

A driver that does not know a field answers ``Field "<name>" is not a valid field to query.`` and exits non-zero;
such a field is dropped from the query (logged once) and the query re-run, so older drivers lose only that series.
"""

from __future__ import annotations

import logging
import re
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime

from collector.contract import metric_names as m
from collector.contract.sample import Sample, utc_now
from collector.nvidia_smi_csv import parse_query_gpu_csv

log = logging.getLogger(__name__)

MIB = 2**20
INVALID_FIELD = re.compile(r'Field "([^"]+)" is not a valid field to query')

SCALED_FIELDS: dict[str, tuple[str, float]] = {
    "utilization.gpu": (m.GPU_UTILIZATION, 0.01),
    "utilization.memory": (m.GPU_MEMORY_UTILIZATION, 0.01),
    "memory.used": (m.GPU_MEMORY_USED, MIB),
    "memory.total": (m.GPU_MEMORY_TOTAL, MIB),
    "power.draw": (m.GPU_POWER, 1.0),
    "temperature.gpu": (m.GPU_TEMPERATURE, 1.0),
    "clocks.current.sm": (m.GPU_SM_CLOCK, 1e6),
    "clocks.current.memory": (m.GPU_MEMORY_CLOCK, 1e6),
    "ecc.errors.corrected.volatile.total": (m.GPU_ECC_CORRECTED, 1.0),
    "ecc.errors.uncorrected.volatile.total": (m.GPU_ECC_UNCORRECTED, 1.0),
    "remapped_rows.correctable": (m.GPU_REMAPPED_CORRECTABLE, 1.0),
    "remapped_rows.uncorrectable": (m.GPU_REMAPPED_UNCORRECTABLE, 1.0),
    "clocks_event_reasons_counters.sw_power_cap": (m.GPU_POWER_VIOLATION, 1e-6),
}
"""query-gpu field -> (metric, factor from nvidia-smi's unit to the base unit)."""

YES_NO_FIELDS = {"remapped_rows.pending": m.GPU_REMAPPED_PENDING, "remapped_rows.failure": m.GPU_REMAPPED_FAILURE}
THERMAL_FIELDS = (
    "clocks_event_reasons_counters.sw_thermal_slowdown",
    "clocks_event_reasons_counters.hw_thermal_slowdown",
)
REASONS_FIELD = "clocks_event_reasons.active"
IDENTITY_FIELDS = ("index", "uuid", "name")
QUERY_FIELDS = (*IDENTITY_FIELDS, *SCALED_FIELDS, *YES_NO_FIELDS, *THERMAL_FIELDS, REASONS_FIELD)


def samples_from_csv(text: str, timestamp: datetime, source: str = "nvidia-smi") -> list[Sample]:
    """One ``entity="gpu"`` sample per line of ``--query-gpu`` CSV output (header line first)."""
    samples = []
    for row in parse_query_gpu_csv(text, source):
        if not all(row.get(f) for f in IDENTITY_FIELDS):
            log.warning("%s: a GPU line without index, uuid or name; skipped", source)
            continue
        values: dict[str, float] = {m.GPU_UP: 1.0}
        for field, (metric, scale) in SCALED_FIELDS.items():
            if (cell := row.get(field)) is not None:
                values[metric] = float(cell) * scale
        for field, metric in YES_NO_FIELDS.items():
            if (cell := row.get(field)) is not None:
                values[metric] = 1.0 if cell == "Yes" else 0.0
        thermal = [row.get(field) for field in THERMAL_FIELDS]
        if all(cell is not None for cell in thermal):
            values[m.GPU_THERMAL_VIOLATION] = sum(float(cell or 0) for cell in thermal) * 1e-6
        if (reasons := row.get(REASONS_FIELD)) is not None:
            values[m.GPU_CLOCKS_EVENT_REASONS] = float(int(reasons, 16))
        labels = {"gpu": str(row["index"]), "uuid": str(row["uuid"]), "model": str(row["name"]),
                  "mig_profile": "", "parent_uuid": ""}  # fmt: skip
        samples.append(Sample("gpu", labels, values, timestamp))
    return samples


class NvidiaSmiSource:
    """Runs nvidia-smi every ``interval_seconds`` on a daemon thread; ``collect`` returns the latest result.

    ``collect`` raises when the last run failed or timed out, or when the latest result is older than
    ``stale_after_seconds`` (default three intervals), so the agent reports the source as failed; the thread
    keeps trying. The first ``collect`` starts the thread and waits for its first run. A host without the
    command gives ``[]`` and one warning.

    Args:
        command: the nvidia-smi executable.
        interval_seconds: time between runs; timeout_seconds: a run's limit.
        clock: timestamps the readings, timezone-aware UTC.
    """

    name = "nvidia_smi"

    def __init__(
        self,
        command: str = "nvidia-smi",
        interval_seconds: float = 10.0,
        timeout_seconds: float = 5.0,
        stale_after_seconds: float | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.command = command
        self.interval_seconds = interval_seconds
        self.timeout_seconds = timeout_seconds
        self.stale_after_seconds = stale_after_seconds or 3 * interval_seconds
        self._clock = clock
        self._fields = list(QUERY_FIELDS)
        self._lock = threading.Lock()
        self._latest: list[Sample] = []
        self._latest_at = 0.0
        self._error: str | None = None
        self._missing = False
        self._first_run = threading.Event()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def collect(self) -> list[Sample]:
        """The latest run's samples; raises RuntimeError if that run failed or is stale."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="nvidia-smi", daemon=True)
            self._thread.start()
            self._first_run.wait(self.timeout_seconds + 1)
        with self._lock:
            if self._missing:
                return []
            if self._error is not None:
                raise RuntimeError(self._error)
            if time.monotonic() - self._latest_at > self.stale_after_seconds:
                raise RuntimeError(f"{self.command}: no result for {self.stale_after_seconds:.0f} s")
            return list(self._latest)

    def stop(self) -> None:
        """End the timer thread (it is a daemon thread, so a process may also simply exit)."""
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.run_once()
            self._first_run.set()
            self._stop.wait(self.interval_seconds)

    def run_once(self) -> None:
        """Run the query once (re-running without fields the driver rejects) and record the result or error."""
        for _attempt in range(len(QUERY_FIELDS)):
            outcome = self._run(self._fields)
            invalid = INVALID_FIELD.search(outcome) if isinstance(outcome, str) else None
            field = invalid.group(1) if invalid is not None else None
            if field is None or field not in self._fields or field in IDENTITY_FIELDS:
                break
            log.warning("%s does not know the field %s; querying without it", self.command, field)
            self._fields.remove(field)
        with self._lock:
            if isinstance(outcome, list):
                self._latest, self._latest_at, self._error = outcome, time.monotonic(), None
            elif outcome is None:
                self._missing = True
            else:
                self._error = outcome

    def _run(self, fields: Sequence[str]) -> list[Sample] | str | None:
        """Samples, or an error message, or None when the command does not exist."""
        argv = [self.command, f"--query-gpu={','.join(fields)}", "--format=csv"]
        try:
            result = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout_seconds)
        except FileNotFoundError:
            if not self._missing:
                log.warning("%s not found: no GPU readings from nvidia-smi", self.command)
            return None
        except subprocess.TimeoutExpired:
            return f"{self.command} timed out after {self.timeout_seconds:.1f} s"
        if result.returncode != 0:
            return f"{self.command} exited {result.returncode}: {(result.stdout + result.stderr).strip()[:300]}"
        return samples_from_csv(result.stdout, self._clock(), self.command)
