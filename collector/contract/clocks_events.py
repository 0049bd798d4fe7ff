"""GPU clocks-event (throttle) reasons: the names of the bits of ``clocks_event_reasons``.

The bits are NVML's ``nvmlClocksEventReason*`` (nvml.h), the same as DCGM's ``DCGM_CLOCKS_EVENT_REASON_*``; the
collector decodes them for ``/metrics``, the service's alert rules and dashboard count readings by reason, and the
waste reasons call a GPU throttled on its thermal and power ones.
"""

from __future__ import annotations

# NVML nvmlClocksEventReason* bits (nvml.h), the same as DCGM_CLOCKS_EVENT_REASON_*.
CLOCKS_EVENT_REASONS: dict[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal": 0x20,
    "hw_thermal": 0x40,
    "hw_power_brake": 0x80,
    "display_clock_setting": 0x100,
}

THERMAL_REASONS = ("sw_thermal", "hw_thermal", "hw_slowdown")
"""The reasons that hold clocks down for heat (``hw_slowdown`` is raised by temperature or the power brake)."""
POWER_REASONS = ("sw_power_cap", "hw_power_brake")
"""The reasons that hold clocks down for power."""
THERMAL_MASK = sum(CLOCKS_EVENT_REASONS[name] for name in THERMAL_REASONS)
POWER_MASK = sum(CLOCKS_EVENT_REASONS[name] for name in POWER_REASONS)
