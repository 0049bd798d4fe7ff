"""Fake ``pynvml`` GPUs built from real ``nvidia-smi -q -x`` XML (``../shared/data/nvidia-smi-xml-telegraf``).

Each ``<gpu>`` element becomes a row in the shape :class:`tests.support.fake_pynvml.FakeNvml` reads (query-gpu field
names, cells as nvidia-smi prints them), so every NVML call answers from the XML:

=====================================  =========================================================================
row field                              XML element (text as printed, e.g. ``67.03 W``, ``N/A``)
=====================================  =========================================================================
name, uuid                             product_name, uuid
utilization.gpu / .memory              utilization/gpu_util, utilization/memory_util
memory.total/.reserved/.used/.free     fb_memory_usage/total, reserved, used, free
power.draw                             power_readings/power_draw or gpu_power_readings/power_draw
temperature.gpu                        temperature/gpu_temp, its `` C`` dropped (query-gpu prints none)
clocks.current.sm / .memory            clocks/sm_clock, clocks/mem_clock
remapped_rows.*                        remapped_rows/remapped_row_corr, _unc, _pending, _failure
mig.mode.current                       mig_mode/current_mig
pci.rx_util / pci.tx_util              pci/rx_util, pci/tx_util (KB/s), for nvmlDeviceGetPcieThroughput
clocks_event_reasons.active            DERIVED: the NVML bitmask of the reasons the XML shows ``Active``
                                       (clocks_event_reasons, or clocks_throttle_reasons on older drivers)
=====================================  =========================================================================

MIG devices come from ``mig_devices/mig_device`` (gpu_instance_id, fb_memory_usage). The XML names neither their
UUID nor their profile, so both are DERIVED: UUID ``MIG-<parent UUID without GPU->-gi<gpu_instance_id>``, profile
``<multiprocessor_count / 14>g.<total memory rounded to GiB>gb`` (14 SMs per A100 GPU slice, NVIDIA MIG user
guide). Compute processes are the ``processes/process_info`` of type ``C`` or ``C+G`` with their
``gpu_instance_id``.
"""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from tests.support.fake_pynvml import FakeNvml, MigDevice

XML_CAPTURES = Path("nvidia-smi-xml-telegraf")
"""The XML captures' folder, relative to the shared data folder."""

FIELDS = {
    "name": "product_name",
    "uuid": "uuid",
    "utilization.gpu": "utilization/gpu_util",
    "utilization.memory": "utilization/memory_util",
    "memory.total": "fb_memory_usage/total",
    "memory.reserved": "fb_memory_usage/reserved",
    "memory.used": "fb_memory_usage/used",
    "memory.free": "fb_memory_usage/free",
    "clocks.current.sm": "clocks/sm_clock",
    "clocks.current.memory": "clocks/mem_clock",
    "remapped_rows.correctable": "remapped_rows/remapped_row_corr",
    "remapped_rows.uncorrectable": "remapped_rows/remapped_row_unc",
    "remapped_rows.pending": "remapped_rows/remapped_row_pending",
    "remapped_rows.failure": "remapped_rows/remapped_row_failure",
    "mig.mode.current": "mig_mode/current_mig",
    "pci.rx_util": "pci/rx_util",
    "pci.tx_util": "pci/tx_util",
}
REASON_BITS = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clocks_setting": 0x100,
}
"""XML reason element suffix -> NVML ``nvmlClocksEventReason*`` bit (nvml.h)."""
SMS_PER_SLICE = 14


def _text(element: ElementTree.Element, path: str) -> str:
    found = element.find(path)
    return "[N/A]" if found is None or found.text is None or found.text.strip() == "N/A" else found.text.strip()


def _reasons(gpu: ElementTree.Element) -> str:
    block = gpu.find("clocks_event_reasons")
    prefix = "clocks_event_reason_"
    if block is None:
        block, prefix = gpu.find("clocks_throttle_reasons"), "clocks_throttle_reason_"
    if block is None:
        return "[N/A]"
    bits = sum(bit for name, bit in REASON_BITS.items() if _text(block, prefix + name) == "Active")
    return f"0x{bits:016X}"


def xml_gpus(path: Path) -> tuple[list[dict[str, str]], list[MigDevice], list[dict[str, str]]]:
    """(query-gpu-like rows, MIG devices, compute processes) of an ``nvidia-smi -q -x`` file."""
    rows, mig, processes = [], [], []
    for index, gpu in enumerate(ElementTree.parse(path).getroot().iter("gpu")):
        row = {field: _text(gpu, element) for field, element in FIELDS.items()}
        row["index"] = str(index)
        row["temperature.gpu"] = _text(gpu, "temperature/gpu_temp").removesuffix(" C")
        power = _text(gpu, "power_readings/power_draw")
        row["power.draw"] = power if power != "[N/A]" else _text(gpu, "gpu_power_readings/power_draw")
        row["clocks_event_reasons.active"] = _reasons(gpu)
        rows.append(row)
        for device in gpu.iterfind("mig_devices/mig_device"):
            instance = int(_text(device, "gpu_instance_id"))
            slices = int(_text(device, "device_attributes/shared/multiprocessor_count")) // SMS_PER_SLICE
            total_mib = int(_text(device, "fb_memory_usage/total").split()[0])
            used_mib = int(_text(device, "fb_memory_usage/used").split()[0])
            uuid = f"MIG-{row['uuid'].removeprefix('GPU-')}-gi{instance}"
            profile = f"{slices}g.{round(total_mib / 1024)}gb"
            position = int(_text(device, "index"))
            mig.append(MigDevice(index, position, profile, uuid, instance, used_mib, total_mib))
        for process in gpu.iterfind("processes/process_info"):
            if _text(process, "type") in ("C", "C+G"):
                processes.append({
                    "gpu_uuid": row["uuid"],
                    "pid": _text(process, "pid"),
                    "used_gpu_memory": _text(process, "used_memory"),
                    "gpu_instance_id": _text(process, "gpu_instance_id"),
                })  # fmt: skip
    return rows, mig, processes


def fake_nvml_from_xml(path: Path, clock: Callable[[], datetime]) -> FakeNvml:
    """A fake ``pynvml`` answering from ``nvidia-smi -q -x`` file ``path``."""
    rows, mig, processes = xml_gpus(path)
    return FakeNvml(rows, clock, mig, processes)
