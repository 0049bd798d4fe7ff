"""What a demo GPU reports when busy and when idle.

- From a real capture (``nvidia-smi-captures`` in the shared data folder, MIT): the ``--query-gpu`` CSV
  rows of the capture's ``load`` and ``idle`` sections, converted to base units. The capture files are
  raw nvidia-smi output split into sections by ``####`` banners titled ``# <state> :: <name>``.
- Without the capture: NOMINAL values for an H100 SXM5 80GB from NVIDIA's datasheet (700 W max board power,
  1980 MHz max boost clock, 80 GB HBM3) and a typical idle draw; labelled nominal, not measured.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

from collector.contract import metric_names as m
from collector.nvidia_smi_csv import parse_query_gpu_csv

MIB = 2**20
_BANNER = re.compile(r"^#{20,}\n", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class GpuProfile:
    """A GPU model's readings when busy and when idle (metric name → base-unit value); ``origin`` says whence."""

    model: str
    memory_total_bytes: int
    busy: dict[str, float]
    idle: dict[str, float]
    origin: str


def _readings(row: dict[str, str | None]) -> dict[str, float]:
    pairs = {
        m.GPU_UTILIZATION: ("utilization.gpu", 0.01),
        m.GPU_MEMORY_UTILIZATION: ("utilization.memory", 0.01),
        m.GPU_MEMORY_USED: ("memory.used", MIB),
        m.GPU_POWER: ("power.draw", 1.0),
        m.GPU_TEMPERATURE: ("temperature.gpu", 1.0),
        m.GPU_SM_CLOCK: ("clocks.current.sm", 1e6),
    }
    values = {metric: float(text) * scale for metric, (field, scale) in pairs.items() if (text := row.get(field))}
    reasons = row.get("clocks_event_reasons.active")
    if reasons:
        values[m.GPU_CLOCKS_EVENT_REASONS] = float(int(reasons, 16))
    return values


def profile_from_capture(path: Path) -> GpuProfile:
    """Busy (``load``) and idle readings of the first GPU in an nvidia-smi capture file.

    Raises ValueError naming the file when a ``query-gpu`` section is missing.
    """
    sections = _BANNER.split(path.read_text())
    rows: dict[str, dict[str, str | None]] = {}
    for title, body in pairwise(sections):
        for state in ("idle", "load"):
            if title.startswith(f"# {state} :: query-gpu"):
                rows[state] = parse_query_gpu_csv(body)[0]
    if set(rows) != {"idle", "load"}:
        raise ValueError(f"{path}: no idle and load query-gpu sections")
    total = rows["load"]["memory.total"]
    return GpuProfile(
        model=rows["load"]["name"] or "unknown",
        memory_total_bytes=int(float(total or 0) * MIB),
        busy=_readings(rows["load"]),
        idle=_readings(rows["idle"]),
        origin=f"measured: {path.name} (load and idle query-gpu rows)",
    )


def nominal_h100_profile() -> GpuProfile:
    """Datasheet-based H100 SXM5 80GB values (nominal, not measured): busy at 700 W, idle at 70 W."""
    return GpuProfile(
        model="NVIDIA H100 80GB HBM3",
        memory_total_bytes=80 * 1024 * MIB,
        busy={
            m.GPU_UTILIZATION: 1.0,
            m.GPU_MEMORY_UTILIZATION: 0.5,
            m.GPU_MEMORY_USED: 40 * 1024 * MIB,
            m.GPU_POWER: 700.0,
            m.GPU_TEMPERATURE: 65.0,
            m.GPU_SM_CLOCK: 1980e6,
            m.GPU_CLOCKS_EVENT_REASONS: 0.0,
        },
        idle={
            m.GPU_UTILIZATION: 0.0,
            m.GPU_MEMORY_UTILIZATION: 0.0,
            m.GPU_MEMORY_USED: 0.0,
            m.GPU_POWER: 70.0,
            m.GPU_TEMPERATURE: 35.0,
            m.GPU_SM_CLOCK: 345e6,
            m.GPU_CLOCKS_EVENT_REASONS: 1.0,
        },
        origin="nominal: NVIDIA H100 SXM5 datasheet figures, not measured",
    )
