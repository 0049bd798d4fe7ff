"""Every metric the collector exposes: name, Prometheus type, unit and origin, labels.

Names follow the Prometheus naming rules: ``gpufinops_`` prefix, base units as suffix, ``_total`` on
counters. Sources put these names as keys of :attr:`collector.contract.sample.Sample.values`; a sample's labels are
the metric's labels. ``docs/metrics.md`` documents each one and a test keeps the two in step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """How one metric is exposed. ``kind`` is the Prometheus type; ``help`` names unit and origin."""

    name: str
    kind: Literal["gauge", "counter"]
    help: str


GPU_UTILIZATION = "gpufinops_gpu_utilization_ratio"
GPU_MEMORY_UTILIZATION = "gpufinops_gpu_memory_utilization_ratio"
GPU_MEMORY_USED = "gpufinops_gpu_memory_used_bytes"
GPU_MEMORY_TOTAL = "gpufinops_gpu_memory_total_bytes"
GPU_POWER = "gpufinops_gpu_power_watts"
GPU_ENERGY = "gpufinops_gpu_energy_joules_total"
GPU_TEMPERATURE = "gpufinops_gpu_temperature_celsius"
GPU_SM_CLOCK = "gpufinops_gpu_sm_clock_hertz"
GPU_MEMORY_CLOCK = "gpufinops_gpu_memory_clock_hertz"
GPU_CLOCKS_EVENT_REASONS = "gpufinops_gpu_clocks_event_reasons"
GPU_THROTTLE_STATUS = "gpufinops_gpu_throttle_status"
GPU_POWER_VIOLATION = "gpufinops_gpu_power_violation_seconds_total"
GPU_THERMAL_VIOLATION = "gpufinops_gpu_thermal_violation_seconds_total"
GPU_ECC_CORRECTED = "gpufinops_gpu_ecc_corrected_errors_total"
GPU_ECC_UNCORRECTED = "gpufinops_gpu_ecc_uncorrected_errors_total"
GPU_PCIE_RX = "gpufinops_gpu_pcie_received_bytes_per_second"
GPU_PCIE_TX = "gpufinops_gpu_pcie_transmitted_bytes_per_second"
GPU_NVLINK_RX = "gpufinops_gpu_nvlink_received_bytes_total"
GPU_NVLINK_TX = "gpufinops_gpu_nvlink_transmitted_bytes_total"
GPU_NVLINK_RX_RATE = "gpufinops_gpu_nvlink_received_bytes_per_second"
GPU_NVLINK_TX_RATE = "gpufinops_gpu_nvlink_transmitted_bytes_per_second"
GPU_REMAPPED_CORRECTABLE = "gpufinops_gpu_remapped_rows_correctable"
GPU_REMAPPED_UNCORRECTABLE = "gpufinops_gpu_remapped_rows_uncorrectable"
GPU_REMAPPED_PENDING = "gpufinops_gpu_remapped_rows_pending"
GPU_REMAPPED_FAILURE = "gpufinops_gpu_remapped_rows_failure"
GPU_UP = "gpufinops_gpu_up"
GPU_SM_ACTIVE = "gpufinops_gpu_sm_active_ratio"
GPU_SM_OCCUPANCY = "gpufinops_gpu_sm_occupancy_ratio"
GPU_TENSOR_ACTIVE = "gpufinops_gpu_tensor_active_ratio"
GPU_TENSOR_HMMA_ACTIVE = "gpufinops_gpu_tensor_hmma_active_ratio"
GPU_TENSOR_IMMA_ACTIVE = "gpufinops_gpu_tensor_imma_active_ratio"
GPU_TENSOR_DFMA_ACTIVE = "gpufinops_gpu_tensor_dfma_active_ratio"
GPU_DRAM_ACTIVE = "gpufinops_gpu_dram_active_ratio"
GPU_FP64_ACTIVE = "gpufinops_gpu_fp64_active_ratio"
GPU_FP32_ACTIVE = "gpufinops_gpu_fp32_active_ratio"
GPU_FP16_ACTIVE = "gpufinops_gpu_fp16_active_ratio"
GPU_GRAPHICS_ENGINE_ACTIVE = "gpufinops_gpu_graphics_engine_active_ratio"
GPU_PROCESS_MEMORY_USED = "gpufinops_gpu_process_memory_used_bytes"
GPU_PROCESS_SM_UTILIZATION = "gpufinops_gpu_process_sm_utilization_ratio"
DISK_READ_BYTES = "gpufinops_disk_read_bytes_total"
DISK_WRITTEN_BYTES = "gpufinops_disk_written_bytes_total"
INFINIBAND_RECEIVED_BYTES = "gpufinops_infiniband_received_bytes_total"
INFINIBAND_TRANSMITTED_BYTES = "gpufinops_infiniband_transmitted_bytes_total"
INFINIBAND_RECEIVED_PACKETS = "gpufinops_infiniband_received_packets_total"
INFINIBAND_TRANSMITTED_PACKETS = "gpufinops_infiniband_transmitted_packets_total"
INFINIBAND_RATE = "gpufinops_infiniband_rate_bytes_per_second"
INFINIBAND_STATE = "gpufinops_infiniband_state_id"
INFINIBAND_PHYSICAL_STATE = "gpufinops_infiniband_physical_state_id"
NFS_READ_BYTES = "gpufinops_nfs_read_bytes_total"
NFS_WRITTEN_BYTES = "gpufinops_nfs_written_bytes_total"
NFS_OPERATIONS = "gpufinops_nfs_operations_total"
LUSTRE_CLIENT_READ_BYTES = "gpufinops_lustre_client_read_bytes_total"
LUSTRE_CLIENT_WRITTEN_BYTES = "gpufinops_lustre_client_written_bytes_total"
LUSTRE_JOB_READ_BYTES = "gpufinops_lustre_job_read_bytes_total"
LUSTRE_JOB_WRITTEN_BYTES = "gpufinops_lustre_job_written_bytes_total"

SPECS: dict[str, MetricSpec] = {
    spec.name: spec
    for spec in (
        MetricSpec(GPU_UTILIZATION, "gauge", "Fraction of time a kernel ran on the GPU (NVML utilization.gpu / 100)."),
        MetricSpec(
            GPU_MEMORY_UTILIZATION,
            "gauge",
            "Fraction of time device memory was read or written (NVML utilization.memory / 100).",
        ),
        MetricSpec(GPU_MEMORY_USED, "gauge", "Device memory in use, bytes (NVML memory.used, MiB x 2^20)."),
        MetricSpec(GPU_MEMORY_TOTAL, "gauge", "Device memory installed, bytes (NVML memory.total, MiB x 2^20)."),
        MetricSpec(GPU_POWER, "gauge", "Board power draw, watts (NVML power usage, mW / 1000)."),
        MetricSpec(
            GPU_ENERGY,
            "counter",
            "Energy used since the driver was loaded, joules (NVML total energy consumption, mJ / 1000).",
        ),
        MetricSpec(GPU_TEMPERATURE, "gauge", "GPU core temperature, degrees Celsius (NVML temperature.gpu)."),
        MetricSpec(GPU_SM_CLOCK, "gauge", "Streaming multiprocessor clock, hertz (NVML SM clock, MHz x 10^6)."),
        MetricSpec(GPU_MEMORY_CLOCK, "gauge", "Memory clock, hertz (NVML memory clock, MHz x 10^6)."),
        MetricSpec(
            GPU_CLOCKS_EVENT_REASONS,
            "gauge",
            "Bitmask of active clocks-event (throttle) reasons (NVML clocks_event_reasons.active; "
            "same bits as DCGM_FI_DEV_CLOCKS_EVENT_REASONS).",
        ),
        MetricSpec(
            GPU_THROTTLE_STATUS,
            "gauge",
            "AMD firmware throttle status bitmask, 0 when not throttled (amdsmi gpu_metrics throttle_status; "
            "ASIC-specific bits, not NVML's clocks-event reasons).",
        ),
        MetricSpec(
            GPU_POWER_VIOLATION,
            "counter",
            "Time clocks were held down by the power limit, seconds (NVML violation status NVML_PERF_POLICY_POWER, "
            "ns / 10^9; DCGM_FI_DEV_POWER_VIOLATION, us / 10^6).",
        ),
        MetricSpec(
            GPU_THERMAL_VIOLATION,
            "counter",
            "Time clocks were held down by temperature, seconds (NVML violation status NVML_PERF_POLICY_THERMAL, "
            "ns / 10^9; DCGM_FI_DEV_THERMAL_VIOLATION, us / 10^6).",
        ),
        MetricSpec(
            GPU_ECC_CORRECTED,
            "counter",
            "Single-bit (corrected) ECC errors since the driver was loaded (NVML volatile ECC count; "
            "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL).",
        ),
        MetricSpec(
            GPU_ECC_UNCORRECTED,
            "counter",
            "Double-bit (uncorrected) ECC errors since the driver was loaded (NVML volatile ECC count; "
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL).",
        ),
        MetricSpec(
            GPU_PCIE_RX,
            "gauge",
            "PCIe receive throughput, bytes/s (NVML GPM PCIE_RX_PER_SEC, MiB/s x 2^20, mean over the cycle; else "
            "NVML PCIe throughput, KB/s x 1024, a 20 ms sample; DCGM_FI_PROF_PCIE_RX_BYTES).",
        ),
        MetricSpec(
            GPU_PCIE_TX,
            "gauge",
            "PCIe transmit throughput, bytes/s (NVML GPM PCIE_TX_PER_SEC, MiB/s x 2^20, mean over the cycle; else "
            "NVML PCIe throughput, KB/s x 1024, a 20 ms sample; DCGM_FI_PROF_PCIE_TX_BYTES).",
        ),
        MetricSpec(
            GPU_NVLINK_RX, "counter", "NVLink data received over all links, bytes (NVML NVLink throughput, KiB x 1024)."
        ),
        MetricSpec(
            GPU_NVLINK_TX,
            "counter",
            "NVLink data transmitted over all links, bytes (NVML NVLink throughput, KiB x 1024).",
        ),
        MetricSpec(
            GPU_NVLINK_RX_RATE,
            "gauge",
            "NVLink receive throughput over all links, bytes/s, mean over the cycle "
            "(NVML GPM NVLINK_TOTAL_RX_PER_SEC, MiB/s x 2^20; DCGM_FI_PROF_NVLINK_RX_BYTES).",
        ),
        MetricSpec(
            GPU_NVLINK_TX_RATE,
            "gauge",
            "NVLink transmit throughput over all links, bytes/s, mean over the cycle "
            "(NVML GPM NVLINK_TOTAL_TX_PER_SEC, MiB/s x 2^20; DCGM_FI_PROF_NVLINK_TX_BYTES).",
        ),
        MetricSpec(GPU_REMAPPED_CORRECTABLE, "gauge", "Rows remapped for correctable errors (NVML remapped rows)."),
        MetricSpec(GPU_REMAPPED_UNCORRECTABLE, "gauge", "Rows remapped for uncorrectable errors (NVML remapped rows)."),
        MetricSpec(GPU_REMAPPED_PENDING, "gauge", "1 if a row remapping waits for a GPU reset (NVML remapped rows)."),
        MetricSpec(GPU_REMAPPED_FAILURE, "gauge", "1 if a row remapping failed (NVML remapped rows)."),
        MetricSpec(GPU_UP, "gauge", "1 if the GPU answered this cycle, 0 if it is lost or timed out."),
        MetricSpec(
            GPU_SM_ACTIVE,
            "gauge",
            "Fraction of time at least one warp was resident on an SM, mean over SMs and the cycle "
            "(DCGM_FI_PROF_SM_ACTIVE; NVML GPM SM_UTIL / 100).",
        ),
        MetricSpec(
            GPU_SM_OCCUPANCY,
            "gauge",
            "Resident warps over the SM's maximum, mean over SMs and the cycle "
            "(DCGM_FI_PROF_SM_OCCUPANCY; NVML GPM SM_OCCUPANCY / 100).",
        ),
        MetricSpec(
            GPU_TENSOR_ACTIVE,
            "gauge",
            "Fraction of cycles any tensor pipe was active, mean over the cycle "
            "(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE; NVML GPM ANY_TENSOR_UTIL / 100).",
        ),
        MetricSpec(
            GPU_TENSOR_HMMA_ACTIVE,
            "gauge",
            "Fraction of cycles the HMMA (half-precision matrix) tensor pipe was active, mean over the cycle "
            "(DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE; NVML GPM HMMA_TENSOR_UTIL / 100).",
        ),
        MetricSpec(
            GPU_TENSOR_IMMA_ACTIVE,
            "gauge",
            "Fraction of cycles the IMMA (integer matrix) tensor pipe was active, mean over the cycle "
            "(DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE; NVML GPM IMMA_TENSOR_UTIL / 100).",
        ),
        MetricSpec(
            GPU_TENSOR_DFMA_ACTIVE,
            "gauge",
            "Fraction of cycles the DFMA (double-precision) tensor pipe was active, mean over the cycle "
            "(DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE; NVML GPM DFMA_TENSOR_UTIL / 100).",
        ),
        MetricSpec(
            GPU_DRAM_ACTIVE,
            "gauge",
            "Fraction of cycles device memory sent or received data, mean over the cycle "
            "(DCGM_FI_PROF_DRAM_ACTIVE; NVML GPM DRAM_BW_UTIL / 100).",
        ),
        MetricSpec(
            GPU_FP64_ACTIVE,
            "gauge",
            "Fraction of cycles the FP64 pipe was active (DCGM_FI_PROF_PIPE_FP64_ACTIVE; NVML GPM FP64_UTIL / 100).",
        ),
        MetricSpec(
            GPU_FP32_ACTIVE,
            "gauge",
            "Fraction of cycles the FMA (FP32) pipe was active "
            "(DCGM_FI_PROF_PIPE_FP32_ACTIVE; NVML GPM FP32_UTIL / 100).",
        ),
        MetricSpec(
            GPU_FP16_ACTIVE,
            "gauge",
            "Fraction of cycles the FP16 pipe was active (DCGM_FI_PROF_PIPE_FP16_ACTIVE; NVML GPM FP16_UTIL / 100).",
        ),
        MetricSpec(
            GPU_GRAPHICS_ENGINE_ACTIVE,
            "gauge",
            "Fraction of time the graphics or compute engine was active "
            "(DCGM_FI_PROF_GR_ENGINE_ACTIVE; NVML GPM GRAPHICS_UTIL / 100).",
        ),
        MetricSpec(
            GPU_PROCESS_MEMORY_USED,
            "gauge",
            "Device memory used by one running compute process, bytes (NVML compute running processes).",
        ),
        MetricSpec(
            GPU_PROCESS_SM_UTILIZATION,
            "gauge",
            "Fraction of time a kernel of one compute process ran on the GPU since the last cycle "
            "(NVML process utilization smUtil / 100, mean over its samples; 0 with no sample).",
        ),
        MetricSpec(DISK_READ_BYTES, "counter", "Bytes read from the block device (/proc/diskstats sectors x 512)."),
        MetricSpec(DISK_WRITTEN_BYTES, "counter", "Bytes written to the block device (/proc/diskstats sectors x 512)."),
        MetricSpec(
            INFINIBAND_RECEIVED_BYTES,
            "counter",
            "Data received on the port, bytes (sysfs port_rcv_data, 4-byte words x 4).",
        ),
        MetricSpec(
            INFINIBAND_TRANSMITTED_BYTES,
            "counter",
            "Data transmitted on the port, bytes (sysfs port_xmit_data, 4-byte words x 4).",
        ),
        MetricSpec(INFINIBAND_RECEIVED_PACKETS, "counter", "Packets received on the port (sysfs port_rcv_packets)."),
        MetricSpec(
            INFINIBAND_TRANSMITTED_PACKETS, "counter", "Packets transmitted on the port (sysfs port_xmit_packets)."
        ),
        MetricSpec(INFINIBAND_RATE, "gauge", "Link rate of the port, bytes per second (sysfs rate, Gb/s x 10^9 / 8)."),
        MetricSpec(INFINIBAND_STATE, "gauge", "Logical port state (sysfs state number: 1 DOWN .. 4 ACTIVE)."),
        MetricSpec(
            INFINIBAND_PHYSICAL_STATE,
            "gauge",
            "Physical port state (sysfs phys_state number: 5 LinkUp, 3 Disabled).",
        ),
        MetricSpec(NFS_READ_BYTES, "counter", "Bytes read through the NFS mount (mountstats bytes: normal + direct)."),
        MetricSpec(
            NFS_WRITTEN_BYTES, "counter", "Bytes written through the NFS mount (mountstats bytes: normal + direct)."
        ),
        MetricSpec(NFS_OPERATIONS, "counter", "RPC operations sent on the NFS mount, per operation (mountstats)."),
        MetricSpec(
            LUSTRE_CLIENT_READ_BYTES, "counter", "Bytes read by this client from a Lustre file system (llite stats)."
        ),
        MetricSpec(
            LUSTRE_CLIENT_WRITTEN_BYTES,
            "counter",
            "Bytes written by this client to a Lustre file system (llite stats).",
        ),
        MetricSpec(
            LUSTRE_JOB_READ_BYTES,
            "counter",
            "Bytes read from a Lustre target by one job (job_stats read_bytes).",
        ),
        MetricSpec(
            LUSTRE_JOB_WRITTEN_BYTES,
            "counter",
            "Bytes written to a Lustre target by one job (server job_stats write_bytes).",
        ),
    )
}
