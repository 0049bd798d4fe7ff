#!/bin/sh
# Slurm Prolog (run by slurmd as root before a job starts on the node): record which job holds which GPU.
#
# Writes one file per GPU of the job into the mapping directory (default /run/gpustat, override with
# GPU_JOB_MAPPING_DIR), each holding "<job id> <uid>": named by GPU index (the name dcgm-exporter's
# --hpc-job-mapping-dir and jobstats read) and by UUID (NVIDIA: GPU-... or, for a MIG instance, MIG-...; AMD: the
# UUID amd-smi and the amdsmi source give, such as 5cff74b5-0000-1000-8000-7e3e3a6ed2a1), which
# `gpu-finops collector --job-mapping-dir` reads first. Files are replaced atomically.
#
# Slurm sets SLURM_JOB_ID, SLURM_JOB_UID, SLURM_JOB_GPUS (GPU indices, comma-separated: NVIDIA GPUs, AMD GPUs, an
# MI250X's GCDs and an MI300X's compute partitions alike, as gres.conf lists them) and, with GPUs bound by UUID or
# MIG, CUDA_VISIBLE_DEVICES (UUIDs) in the prolog environment; for AMD GPUs ROCR_VISIBLE_DEVICES and
# HIP_VISIBLE_DEVICES may be set too. The UUIDs of the indices come from nvidia-smi, else amd-smi (`amd-smi list
# --csv`: columns gpu and gpu_uuid); of the *_VISIBLE_DEVICES lists only UUIDs are recorded, as their numbers count
# the job's own devices from 0, not the node's. slurmd gives the prolog a fresh environment: set
# GPU_JOB_MAPPING_DIR in a wrapper, not in slurmd's. Install in slurm.conf:
#   Prolog=/usr/lib/gpu-finops/prolog.sh    Epilog=/usr/lib/gpu-finops/epilog.sh    PrologFlags=Alloc
# PrologFlags=Alloc runs it on every node of a job when the job is allocated (without it, only where a step starts).
set -eu

dir="${GPU_JOB_MAPPING_DIR:-/run/gpustat}"
nvidia_smi="${NVIDIA_SMI:-nvidia-smi}"
amd_smi="${AMD_SMI:-amd-smi}"
visible="${CUDA_VISIBLE_DEVICES:-},${ROCR_VISIBLE_DEVICES:-},${HIP_VISIBLE_DEVICES:-}"
[ -n "${SLURM_JOB_GPUS:-}${visible#,,}" ] || exit 0
mkdir -p "$dir"

record() {
    tmp="$dir/.$1.$$"
    printf '%s %s\n' "$SLURM_JOB_ID" "${SLURM_JOB_UID:-}" > "$tmp"
    mv -f "$tmp" "$dir/$1"
}

uuids=""
if command -v "$nvidia_smi" >/dev/null 2>&1; then
    uuids=$("$nvidia_smi" --query-gpu=index,uuid --format=csv,noheader 2>/dev/null || true)
fi
if [ -z "$uuids" ] && command -v "$amd_smi" >/dev/null 2>&1; then
    uuids=$("$amd_smi" list --csv 2>/dev/null | awk -F', *' '
        NR == 1 { for (i = 1; i <= NF; i++) { if ($i == "gpu") g = i; if ($i == "gpu_uuid") u = i }; next }
        g && u { print $g ", " $u }' || true)
fi

old_ifs=$IFS
IFS=,
for index in ${SLURM_JOB_GPUS:-}; do
    record "$index"
    uuid=$(printf '%s\n' "$uuids" | awk -F', *' -v i="$index" '$1 == i { print $2 }')
    if [ -n "$uuid" ]; then record "$uuid"; fi
done
for device in $visible; do
    case "$device" in
        GPU-*|MIG-*) record "$device" ;;
        *-*-*-*-*) record "$device" ;;  # an AMD UUID (amd-smi's form, no prefix)
    esac
done
IFS=$old_ifs
